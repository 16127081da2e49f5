//! The process's memory policy, set before anything else runs.
//!
//! glibc's malloc serves blocks above a threshold (128 KiB at first) with their own `mmap` and gives
//! them back to the kernel when freed, and trims freed memory at the top of its heaps; the next large
//! block then arrives as fresh pages that fault in one by one and that the kernel zero-fills. ecstack
//! allocates chunk images, 1 MiB frames and whole segments per request, so in the cluster benchmark
//! (`ecstack bench cluster --no-minio --file-size 0`, perf over the MDS, OSDs and clients) the kernel's
//! page zeroing (`clear_page_erms`) and page faults were about a fifth of all CPU. Blocks up to 32 MiB
//! (glibc's largest mmap threshold) now come from the heaps, and up to 512 MiB freed at a heap's top
//! stay in the process, so the next request reuses warm pages: the same benchmark used 27 % less CPU
//! (docs/benchmarks.md). The cost is resident memory a process keeps after a burst, bounded by its
//! peak use.

/// Applies the policy (glibc only; other C libraries keep their defaults). Returns whether it applied.
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const MMAP_THRESHOLD: libc::c_int = 32 << 20;
        const TRIM_THRESHOLD: libc::c_int = 512 << 20;
        // SAFETY: mallopt only changes malloc's tunables; it is called before any thread starts.
        let mmap = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) };
        let trim = unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) };
        mmap == 1 && trim == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_accepts_the_policy() {
        assert!(super::keep_freed_memory());
    }
}
