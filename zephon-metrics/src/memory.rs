//! Anonymous memory (`RssAnon`: heap, stacks, buffers, what a process
//! itself holds, without the file pages a mapped shard brings in) as the
//! kernel reports it in `/proc/PID/status`: the memory figure printed
//! beside throughput.

use std::path::Path;

/// Current `RssAnon` of this process in bytes; `None` where it cannot be
/// read (not Linux).
pub fn rss_anon() -> Option<u64> {
    rss_anon_of(Path::new("/proc/self/status"))
}

/// `RssAnon` of the process whose `/proc/PID/status` is `status`, in bytes.
pub fn rss_anon_of(status: &Path) -> Option<u64> {
    parse_rss_anon(&std::fs::read_to_string(status).ok()?)
}

/// The `RssAnon:` line of a `/proc/PID/status` text, in bytes.
fn parse_rss_anon(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    let mut f = line["RssAnon:".len()..].split_whitespace();
    let n: u64 = f.next()?.parse().ok()?;
    // The kernel prints this field in kB (KiB) always.
    (f.next()? == "kB").then_some(n * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_status_line_in_kib() {
        let s = "Name:\tx\nVmRSS:\t  9000 kB\nRssAnon:\t    1234 kB\nRssFile:\t 7 kB\n";
        assert_eq!(parse_rss_anon(s), Some(1234 * 1024));
        assert_eq!(parse_rss_anon("RssAnon:\t12 MB\n"), None);
        assert_eq!(parse_rss_anon("RssAnon:\tmany kB\n"), None);
        assert_eq!(parse_rss_anon("VmRSS:\t1 kB\n"), None);
    }
}
