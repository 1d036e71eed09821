//! Peak anonymous memory (`RssAnon`) of a process during a measured run, the
//! memory figure every benchmark prints beside its throughput.
//!
//! The kernel keeps a high-water mark only for the whole resident set
//! (`VmHWM`), which also counts file pages a mapped shard brings in; the
//! anonymous part (heap, stacks, buffers: what the loader itself holds) has
//! no peak, so a background thread samples `RssAnon:` from
//! `/proc/PID/status` while the run goes on and keeps the largest value.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;
use zephon_metrics::memory::rss_anon_of;

/// How often the sampler reads `/proc`: often enough to see a buffer that
/// lives a few tens of milliseconds, rarely enough (a read costs tens of
/// microseconds) not to show in the throughput it sits beside.
const EVERY: Duration = Duration::from_millis(5);

/// Samples between two listings of a sampled tree's processes.
const RESCAN: u64 = 20;

/// The `/proc/PID/status` paths of every descendant of the process whose
/// status is `root` (not the root itself), found through each process's
/// parent in `/proc/PID/stat`.
fn descendants(root: &Path) -> Vec<PathBuf> {
    let Some(root_pid) = root
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse::<u32>().ok())
    else {
        return Vec::new();
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut parent_of = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| parse_ppid(&s))
        {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root_pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(
            parent_of
                .iter()
                .filter(|&&(_, pp)| pp == p)
                .map(|&(c, _)| c),
        );
        i += 1;
    }
    found[1..]
        .iter()
        .map(|p| PathBuf::from(format!("/proc/{p}/status")))
        .collect()
}

/// The parent pid of a `/proc/PID/stat` line: the second field after the
/// command, which is in parentheses and may itself hold spaces and `)`.
fn parse_ppid(stat: &str) -> Option<u32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// A background sampler of this process's `RssAnon`; [`PeakRss::stop`]
/// returns the largest value it saw. A benchmark that runs a configuration
/// in a child process samples inside the child, around the measured part
/// only, and reports the figure with its timings.
#[derive(Debug)]
pub struct PeakRss {
    status: PathBuf,
    /// Whether the figure sums the process and all its descendants.
    tree: bool,
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl PeakRss {
    /// Starts sampling this process.
    pub fn start() -> Self {
        Self::sampling(PathBuf::from("/proc/self/status"), false)
    }

    /// Starts sampling another process alone; once it has exited, its last
    /// sample stands.
    #[cfg(test)]
    pub fn of_process(pid: u32) -> Self {
        Self::sampling(PathBuf::from(format!("/proc/{pid}/status")), false)
    }

    /// Starts sampling another process together with every process it
    /// starts: a peer with worker processes (a Pillow pool, Grain's
    /// workers) holds its memory in them, so each sample is the sum over
    /// the tree at that moment. Once the root has exited, its last sample
    /// stands.
    pub fn of_tree(pid: u32) -> Self {
        Self::sampling(PathBuf::from(format!("/proc/{pid}/status")), true)
    }

    fn sampling(status: PathBuf, tree: bool) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(rss_anon_of(&status).unwrap_or(0)));
        let thread = {
            let (stop, peak, status) = (stop.clone(), peak.clone(), status.clone());
            std::thread::Builder::new()
                .name("rss-sampler".into())
                .spawn(move || {
                    let mut members = Vec::new();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        // Listing every process costs far more than one
                        // read, so the tree is found again only every
                        // RESCAN samples; a worker younger than that is
                        // counted from the next listing on.
                        if tree && n.is_multiple_of(RESCAN) {
                            members = descendants(&status);
                        }
                        n += 1;
                        let Some(root) = rss_anon_of(&status) else {
                            break;
                        };
                        let rest: u64 = members.iter().filter_map(|p| rss_anon_of(p)).sum();
                        peak.fetch_max(root + rest, Ordering::Relaxed);
                        std::thread::sleep(EVERY);
                    }
                })
                .ok()
        };
        Self {
            status,
            tree,
            stop,
            peak,
            thread,
        }
    }

    /// Stops sampling; the peak in bytes, `None` where `/proc` could not be
    /// read at all (then no figure is better than a zero).
    pub fn stop(mut self) -> Option<u64> {
        // One last sample, so a run shorter than the period still counts
        // its end state.
        if let Some(v) = rss_anon_of(&self.status) {
            let rest: u64 = if self.tree {
                descendants(&self.status)
                    .iter()
                    .filter_map(|p| rss_anon_of(p))
                    .sum()
            } else {
                0
            };
            self.peak.fetch_max(v + rest, Ordering::Relaxed);
        }
        self.finish();
        match self.peak.load(Ordering::Relaxed) {
            0 => None,
            v => Some(v),
        }
    }

    fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for PeakRss {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Bytes as MiB with one decimal, `-` for no figure: the table cell.
pub fn mib(bytes: Option<u64>) -> String {
    bytes.map_or_else(
        || "-".to_owned(),
        |b| format!("{:.1}", b as f64 / 1048576.0),
    )
}

/// Bytes as whole MiB for JSON output (`null` for no figure).
pub fn mib_json(bytes: Option<u64>) -> serde_json::Value {
    bytes.map_or(serde_json::Value::Null, |b| {
        ((b as f64 / 1048576.0 * 10.0).round() / 10.0).into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_parent_in_a_stat_line() {
        assert_eq!(parse_ppid("42 (a) b) S 7 42 42 0"), Some(7));
        assert_eq!(parse_ppid("42 (sh) R 1 42"), Some(1));
        assert_eq!(parse_ppid("garbage"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_tree_counts_the_memory_of_the_children() {
        // A shell whose child holds 64 MiB: the tree sees it, the shell
        // alone does not.
        let child = std::process::Command::new("sh")
            .args([
                "-c",
                "python3 -c 'import time; b = b\"x\" * (64 << 20); time.sleep(1.5)' & wait",
            ])
            .spawn()
            .expect("sh and python3");
        let tree = PeakRss::of_tree(child.id());
        let alone = PeakRss::of_process(child.id());
        std::thread::sleep(Duration::from_millis(1200));
        let (tree, alone) = (tree.stop(), alone.stop());
        let _ = child.wait_with_output();
        let tree = tree.expect("a peak");
        assert!(tree >= 60 << 20, "tree peak {tree} B");
        assert!(alone.unwrap_or(0) < 32 << 20, "shell alone {alone:?} B");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn sees_a_buffer_held_during_the_run() {
        let before = zephon_metrics::memory::rss_anon().expect("RssAnon on Linux");
        let sampler = PeakRss::start();
        // 64 MiB written page by page, so it is resident, held for several
        // sampling periods, then freed before stop().
        let mut v = vec![0u8; 64 << 20];
        for i in (0..v.len()).step_by(4096) {
            v[i] = 1;
        }
        std::thread::sleep(EVERY * 8);
        std::hint::black_box(&v);
        drop(v);
        let peak = sampler.stop().expect("a peak");
        assert!(
            peak >= before + (48 << 20),
            "peak {peak} B, before {before} B"
        );
    }
}
