//! Giving the heap freed after a burst back to the operating system.
//!
//! The first deploy of host history on a large fleet queues every host at once; the
//! queue and the writer's batches are freed when it drains, but glibc keeps freed
//! memory in its arenas, so the steady state would pay for the burst's peak (measured
//! at 1M agents: ~60 B per agent of RSS that held nothing). `malloc_trim` returns the
//! free pages of every arena. Other allocators and platforms: nothing to do.

/// Hosts written by one flush of the history writer above which the heap is trimmed
/// afterwards: a burst, not the steady trickle of changed hosts (a trim walks every
/// arena: a few milliseconds at 1M agents, too much for every 2-second flush).
pub(crate) const TRIM_AFTER_HOSTS: usize = 4096;

/// Returns the heap's free pages to the operating system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // an FFI call into glibc; see below
pub(crate) fn trim() {
    // SAFETY: malloc_trim takes no pointer and only walks glibc's own arenas under
    // their locks; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Returns the heap's free pages to the operating system (nothing to do here).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn trim() {}
