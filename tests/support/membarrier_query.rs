//! Whether this kernel offers private expedited membarriers, asked with `MEMBARRIER_CMD_QUERY`,
//! which registers nothing: where it does, a ring asked for asymmetric wake-up fences runs them;
//! where it does not, rings use symmetric fences, and a wait never needs the system call.

/// Whether `MEMBARRIER_CMD_PRIVATE_EXPEDITED` is available to this process.
pub fn expedited_membarrier_supported() -> bool {
    const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
    const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    // SAFETY: the query command takes no pointer and only returns a bit mask (or -1).
    let mask = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) };
    mask > 0 && mask & MEMBARRIER_CMD_PRIVATE_EXPEDITED != 0
}
