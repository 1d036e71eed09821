//! Aligned-table `Display` for the snapshots.

use crate::report::BottleneckReport;
use crate::snapshot::{FetchTimingSnapshot, MetricsSnapshot, PrefetchTimingSnapshot};
use comfy_table::{CellAlignment, Table, presets};
use std::fmt;

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    t.set_header(header.iter().copied());
    for i in 1..header.len() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

fn ms(s: f64) -> String {
    format!("{:.3}", s * 1e3)
}

impl fmt::Display for MetricsSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "pipeline metrics ({} tracking, {:.2} s elapsed, consumer wait ratio {:.1}%)",
            self.tracking,
            self.elapsed_s,
            self.total_wait_ratio * 100.0
        )?;
        let mut t = table(&[
            "#",
            "operator",
            "par",
            "in",
            "out",
            "MB out",
            "busy s",
            "busy %",
            "wait in s",
            "blocked s",
            "min ms",
            "avg ms",
            "max ms",
            "max queue",
        ]);
        for o in &self.operators {
            t.add_row(vec![
                o.position.to_string(),
                o.name.clone(),
                o.parallelism.to_string(),
                o.elements_in.to_string(),
                o.elements_out.to_string(),
                format!("{:.1}", o.bytes_out as f64 / 1e6),
                format!("{:.3}", o.busy_s),
                format!("{:.1}", o.busy_ratio * 100.0),
                format!("{:.3}", o.wait_input_s),
                format!("{:.3}", o.blocked_output_s),
                ms(o.min_element_s),
                ms(o.avg_element_s),
                ms(o.max_element_s),
                match o.queue_capacity {
                    Some(c) => format!("{}/{}", o.max_queue_depth, c),
                    None => o.max_queue_depth.to_string(),
                },
            ]);
        }
        writeln!(f, "{t}")?;
        let s = &self.startup;
        write!(
            f,
            "start-up: first batch {}; steady state over {} batches: interval p50 {} ms, p90 {} ms, p99 {} ms; consumer waited {:.3} s, worked {:.3} s",
            s.time_to_first_batch_s
                .map_or("-".into(), |t| format!("{:.3} s", t)),
            s.batches,
            ms(s.interval_p50_s),
            ms(s.interval_p90_s),
            ms(s.interval_p99_s),
            s.consumer_wait_s,
            s.consumer_busy_s
        )?;
        match &self.schedule {
            // The schedule's lines end in a newline of their own.
            Some(schedule) => write!(f, "\n{}", schedule.to_string().trim_end()),
            None => Ok(()),
        }
    }
}

impl fmt::Display for FetchTimingSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "fetch timing ({})", self.cache_summary())?;
        let mut t = table(&[
            "dataset",
            "shard",
            "samples",
            "groups",
            "hits",
            "misses",
            "open s",
            "read s",
            "avg group ms",
            "reopens",
        ]);
        for s in self.per_shard.iter().chain(std::iter::once(&self.totals)) {
            t.add_row(vec![
                s.dataset.clone(),
                if s.shard.is_empty() {
                    "(total)".into()
                } else {
                    s.shard.clone()
                },
                s.samples.to_string(),
                s.groups.to_string(),
                s.cache_hits.to_string(),
                s.cache_misses.to_string(),
                format!("{:.3}", s.open_s),
                format!("{:.3}", s.read_s),
                ms(s.avg_group_s),
                s.reopens.to_string(),
            ]);
        }
        write!(f, "{t}")?;
        for (ds, io) in &self.storage {
            write!(
                f,
                "\nstorage `{ds}`: cache hits {}, misses {}, failures {}, retries {}, {:.1} MB downloaded in {:.3} s, decode {:.3} s, evictions {}{}",
                io.cache_hits,
                io.cache_misses,
                io.failures,
                io.retries,
                io.bytes_downloaded as f64 / 1e6,
                io.download_s,
                io.decode_s,
                io.evictions,
                if io.thrashing { ", THRASHING" } else { "" }
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for PrefetchTimingSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "prefetch: {} requests, {} ok, {} failed (success rate {:.1}%), {:.1} MB, download {:.3} s, decompress {:.3} s",
            self.requests,
            self.successes,
            self.failures,
            self.success_rate * 100.0,
            self.bytes as f64 / 1e6,
            self.download_s,
            self.decompress_s
        )
    }
}

impl fmt::Display for BottleneckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "bottleneck: {}", self.summary)?;
        for e in &self.evidence {
            writeln!(f, "  - {e}")?;
        }
        write!(f, "advice:")?;
        for a in &self.advice {
            write!(f, "\n  * {a}")?;
        }
        Ok(())
    }
}
