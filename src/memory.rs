//! Memory after start-up: a job supervisor (DESIGN §4: < 2 MiB RSS), an MCP server's guard
//! and the TUI once it has settled give back the pages only their start-up needed.
//!
//! A supervisor is the talaria binary, so starting one faults in pages it never needs again:
//! the dynamic loader reads the whole relocation table (`.rela.dyn`, MiBs in a large PIE),
//! and the code that parses the spec, prepares the sandbox and spawns the job is spread over
//! a large text, each fault mapping the 64 KiB around it (the kernel's fault-around). All of
//! these pages belong to segments without write permission: clean, shared copies of the file
//! in the page cache (talaria and every other supervisor map the same ones).
//! [`drop_read_only_pages`] removes them from this process's page tables with
//! `madvise(MADV_DONTNEED)` once the job runs. Nothing is lost: a page the supervisor's loop
//! touches again is mapped back from the page cache on its next access, as after any
//! reclaim; the page cache itself is not touched. Writable segments (`.data`, `.bss`, and
//! RELRO, which the loader wrote relocations into before making it read-only) are never
//! advised, since dropping a written private page would bring back the file's bytes.

/// Page-aligned `[start, end)` ranges of the segments loaded without write permission
/// (code and constants) of the executable and every shared library; the vDSO is left out.
/// Each range is rounded inwards, so no page of a neighbouring segment is ever included.
#[cfg(target_os = "linux")]
pub(crate) fn read_only_segments() -> Vec<(usize, usize)> {
    struct Found {
        page: usize,
        vdso: usize,
        ranges: Vec<(usize, usize)>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of the call, and `data`
        // is the `Found` below, borrowed by nobody else while the iteration runs.
        let (info, found) = unsafe { (&*info, &mut *data.cast::<Found>()) };
        let base = info.dlpi_addr as usize;
        // SAFETY: the object's name, a C string (empty for the executable) or null.
        let name = if info.dlpi_name.is_null() {
            &[][..]
        } else {
            unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes()
        };
        if info.dlpi_phdr.is_null() || (found.vdso != 0 && base == found.vdso) || name.starts_with(b"linux-vdso") {
            return 0;
        }
        // SAFETY: the loader's program headers of this object, `dlpi_phnum` of them.
        let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        for ph in headers {
            if ph.p_type != libc::PT_LOAD || ph.p_flags & libc::PF_W != 0 {
                continue;
            }
            let from = base + ph.p_vaddr as usize;
            let start = from.div_ceil(found.page) * found.page;
            let end = (from + ph.p_memsz as usize) / found.page * found.page;
            if end > start {
                found.ranges.push((start, end));
            }
        }
        0
    }
    // SAFETY: sysconf and getauxval only read process constants.
    let (page, vdso) = unsafe { (libc::sysconf(libc::_SC_PAGESIZE), libc::getauxval(libc::AT_SYSINFO_EHDR)) };
    let mut found =
        Found { page: usize::try_from(page).unwrap_or(4096).max(1), vdso: vdso as usize, ranges: Vec::new() };
    // SAFETY: the callback only reads the headers it is given and pushes to `found`.
    unsafe {
        libc::dl_iterate_phdr(Some(each), (&raw mut found).cast());
    }
    found.ranges
}

/// Unmap this process's clean code and constant pages (see the module comment). Called by a
/// supervisor once its job runs, by an MCP guard once its server runs, and by the TUI a
/// second after its first frame; a failure only leaves the memory figure as it was.
#[cfg(target_os = "linux")]
pub(crate) fn drop_read_only_pages() {
    for (start, end) in read_only_segments() {
        // SAFETY: a page-aligned range inside a read-only, file-backed mapping of a loaded
        // object: MADV_DONTNEED only drops clean pages that fault back in unchanged.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn drop_read_only_pages() {}

/// Return the heap memory start-up freed (the spec, the sandbox's path lists) to the kernel:
/// glibc keeps freed memory for reuse unless asked.
pub(crate) fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Make every thread allocate from one glibc arena; call first thing in `main`, before
/// any thread starts. By default each new thread can get an arena of its own (up to eight
/// per core), and each keeps the pages its freed chunks lie on: over the soak's 2,000
/// turns RSS rose +4.5 MiB while heaptrack's live heap stayed flat at about 4 MB, and
/// +3.0 with one arena, keystrokes no slower (BENCHMARKS). Threads still allocate small
/// chunks from their own caches without the arena's lock. `mallopt` rather than
/// `MALLOC_ARENA_MAX`: the variable would reach every command talaria runs.
pub fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets an allocator parameter; it takes no pointers (nix has no call).
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// The least time between two [`trim_heap_now_and_then`] trims.
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

static LAST_TRIM: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);

/// At a quiet moment of a long run (a turn's end), give freed heap back as [`trim_heap`]
/// does, at most once per `TRIM_EVERY`, on a blocking thread: glibc returns only the free
/// top of its heap by itself, and keeps free pages below live chunks. True when a trim was
/// started.
pub(crate) fn trim_heap_now_and_then() -> bool {
    let due = {
        let mut last = LAST_TRIM.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        trim_due(&mut last, std::time::Instant::now())
    };
    if due {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn_blocking(trim_heap);
        } else {
            trim_heap();
        }
    }
    due
}

/// Whether a trim is due at `now` after the one at `last`; notes `now` when it is.
fn trim_due(last: &mut Option<std::time::Instant>, now: std::time::Instant) -> bool {
    if last.is_some_and(|at| now.saturating_duration_since(at) < TRIM_EVERY) {
        return false;
    }
    *last = Some(now);
    true
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_heap_is_trimmed_at_most_once_per_period() {
        let start = std::time::Instant::now();
        let mut last = None;
        assert!(trim_due(&mut last, start), "the first quiet moment trims");
        assert!(!trim_due(&mut last, start + TRIM_EVERY / 2));
        assert!(!trim_due(&mut last, start + TRIM_EVERY - std::time::Duration::from_millis(1)));
        assert!(trim_due(&mut last, start + TRIM_EVERY));
        assert!(!trim_due(&mut last, start + TRIM_EVERY + std::time::Duration::from_secs(1)));
    }

    /// `/proc/self/smaps`: (start, end, permissions, file-backed, anonymous KiB) per mapping.
    fn mappings() -> Vec<(usize, usize, String, bool, u64)> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut out: Vec<(usize, usize, String, bool, u64)> = Vec::new();
        for line in smaps.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if let Some((a, b)) = words[0].split_once('-').filter(|_| !words[0].ends_with(':')) {
                let file = words.get(5).is_some_and(|p| p.starts_with('/'));
                let range = (usize::from_str_radix(a, 16).unwrap(), usize::from_str_radix(b, 16).unwrap());
                out.push((range.0, range.1, words[1].to_string(), file, 0));
            } else if words[0] == "Anonymous:" {
                out.last_mut().unwrap().4 = words[1].parse().unwrap();
            }
        }
        out
    }

    #[test]
    fn only_clean_read_only_file_pages_are_chosen() {
        let ranges = read_only_segments();
        // This test binary's code is among them.
        let here = only_clean_read_only_file_pages_are_chosen as *const () as usize;
        assert!(ranges.iter().any(|(s, e)| (*s..*e).contains(&here)), "{ranges:x?}");
        let maps = mappings();
        for (start, end) in ranges {
            assert_eq!(start % 4096, 0);
            assert_eq!(end % 4096, 0);
            // Every page of the range lies in a file mapping that is not writable and
            // holds no page this process wrote (RELRO holds relocated ones).
            let mut at = start;
            while at < end {
                let m = maps.iter().find(|m| m.0 <= at && at < m.1).unwrap_or_else(|| panic!("{at:x} unmapped"));
                assert!(m.3 && !m.2.contains('w') && m.4 == 0, "{start:x}-{end:x} covers {m:x?}");
                at = m.1;
            }
        }
    }

    #[test]
    fn dropped_pages_come_back_unchanged() {
        let ranges = read_only_segments();
        let sum = |ranges: &[(usize, usize)]| -> u64 {
            ranges
                .iter()
                .map(|(s, e)| {
                    // SAFETY: mapped, readable ranges of loaded objects (checked above).
                    let bytes = unsafe { std::slice::from_raw_parts(*s as *const u8, e - s) };
                    bytes.iter().fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(*b))
                })
                .fold(0, |h, x| h.wrapping_mul(31).wrapping_add(x))
        };
        let before = sum(&ranges);
        drop_read_only_pages();
        // The code runs on (this very function was dropped), and reads the same bytes.
        assert_eq!(sum(&ranges), before);
    }
}
