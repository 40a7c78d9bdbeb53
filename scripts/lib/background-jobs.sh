# Sourced by the scripts that run work as background jobs (scripts/loom, scripts/fuzz).
#
# Bash starts a non-interactive script's background jobs with SIGINT ignored, and `timeout` moves
# its command into a process group of its own, so neither a Ctrl-C nor a TERM sent to the script
# reaches the model or fuzzer processes it started: they would keep both cores busy for up to
# their time limit. `stop_background_jobs_on_interrupt` makes an interrupt end them too.

# kill_tree <pid>: TERM to the process and everything below it, children first (from /proc, so it
# needs no procps on a fresh machine).
kill_tree() {
    local child
    for child in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
        kill_tree "$child"
    done
    kill -TERM "$1" 2>/dev/null || true
}

# On SIGINT or SIGTERM: stop every background job of this shell with its descendants, then exit
# with the signal's status (the EXIT trap, if any, still runs).
stop_background_jobs_on_interrupt() {
    trap 'stop_background_jobs 130' INT
    trap 'stop_background_jobs 143' TERM
}

stop_background_jobs() {
    trap '' INT TERM
    local job
    for job in $(jobs -p); do
        kill_tree "$job"
    done
    echo "$(basename "$0"): interrupted; background jobs stopped" >&2
    exit "$1"
}
