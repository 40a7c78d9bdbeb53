//! Taking a slot's cache line for writing a few pushes before the push that fills it.
//!
//! A slot's line was last read by the readers one window ago, and on a machine with large private
//! caches they usually still hold it. The push that writes it must first invalidate their copies
//! (a read-for-ownership: a cross-core round trip), and the push's wake-up fence waits for that
//! store to complete: with 32-byte slots (a `Bytes`) every other push stalls for a round trip.
//! Asking for the line in exclusive state a few slots ahead overlaps the round trip with the
//! pushes in between (`docs/benchmarks.md`, scenario 7).

/// How far ahead of the slot being written the producer takes ownership, in bytes of slots: four
/// cache lines. Measured on scenario 7 (1 reader, 32-byte slots): 256 and 1,024 bytes did the same;
/// much further ahead the line may be claimed while a late reader still reads it.
const AHEAD_BYTES: usize = 256;

/// How many slots of `slot_bytes` bytes ahead the producer prefetches, or 0 for no prefetching
/// (zero-sized slots, or a processor without a write-prefetch instruction the crate uses).
pub(crate) fn slots_ahead(slot_bytes: usize) -> usize {
    if supported() {
        distance(slot_bytes)
    } else {
        0
    }
}

/// [`AHEAD_BYTES`] in slots of `slot_bytes` bytes: at least one slot, and 0 for zero-sized slots
/// (they have no line to take).
fn distance(slot_bytes: usize) -> usize {
    if slot_bytes == 0 {
        return 0;
    }
    (AHEAD_BYTES / slot_bytes).max(1)
}

pub(crate) use imp::prefetch_for_write;

/// Whether the producer prefetches at all: only where the instruction exists, and never under
/// loom or Miri (which model memory, not caches, and cannot run inline assembly) nor in an SGX
/// enclave (where CPUID traps).
pub(crate) fn supported() -> bool {
    !cfg!(any(miri, replay_ring_loom, target_env = "sgx")) && imp::has_prefetchw()
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::sync::OnceLock;

    /// Whether this processor has PREFETCHW (CPUID leaf 0x8000_0001, ECX bit 8). Asked once:
    /// CPUID traps to the hypervisor in a virtual machine, and rings may be built per request.
    pub(super) fn has_prefetchw() -> bool {
        static PREFETCHW: OnceLock<bool> = OnceLock::new();
        *PREFETCHW.get_or_init(|| {
            // SAFETY: CPUID exists on every x86-64 processor, and every x86-64 processor has the
            // extended leaf 0x8000_0001 (it reports long mode). (Safe to call in newer Rust.)
            #[allow(unused_unsafe)]
            let leaf = unsafe { std::arch::x86_64::__cpuid(0x8000_0001) };
            leaf.ecx & (1 << 8) != 0
        })
    }

    /// Hints that the cache line holding `ptr` is about to be written. Only called when
    /// [`slots_ahead`](super::slots_ahead) is not 0 (the processor has the instruction).
    #[inline(always)]
    pub(crate) fn prefetch_for_write<T>(ptr: *const T) {
        debug_assert!(super::supported(), "prefetch_for_write without PREFETCHW");
        // SAFETY: `slots_ahead` returned non-zero, so CPUID said PREFETCHW exists. It only moves
        // a cache line between caches: it reads and writes no memory architecturally and raises
        // no fault for any address; it leaves the flags and the stack alone (as the options say;
        // `readonly` rather than `nomem`, since it takes an address the way a load does).
        unsafe {
            std::arch::asm!(
                "prefetchw [{line}]",
                line = in(reg) ptr,
                options(nostack, preserves_flags, readonly)
            );
        }
    }
}

/// Other processors: no write-prefetch instruction the crate uses.
#[cfg(not(target_arch = "x86_64"))]
mod imp {
    pub(super) fn has_prefetchw() -> bool {
        false
    }

    /// Never called (`slots_ahead` is 0 here); a hint, so a no-op if it were.
    pub(crate) fn prefetch_for_write<T>(_ptr: *const T) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_sized_slots_are_not_prefetched() {
        assert_eq!(distance(0), 0);
        assert_eq!(slots_ahead(0), 0);
    }

    #[test]
    fn the_distance_is_four_lines_of_slots_and_at_least_one_slot() {
        assert_eq!(distance(8), 32);
        assert_eq!(distance(32), 8);
        assert_eq!(
            distance(AHEAD_BYTES * 4),
            1,
            "a slot larger than the distance"
        );
    }
}
