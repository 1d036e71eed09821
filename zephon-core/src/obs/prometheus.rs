//! The pipeline's metrics in the Prometheus (OpenMetrics) text format, on
//! an HTTP address of the user's: per operator, the consumer, per dataset
//! and per storage cache. Feature `prometheus`.
//!
//! Every scrape reads the same snapshots as
//! [`Observer::metrics_snapshot`] and [`Observer::fetch_timing_snapshot`],
//! so a dashboard shows what the pipeline's own reports show. The
//! endpoint serves `/metrics` on a thread of its own; nothing is computed
//! between scrapes.

use super::Observer;
use crate::error::{Error, Result};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;
use zephon_metrics::{IoStats, OperatorMetrics};

/// The setting errors name.
const KEY: &str = "metrics_addr";

/// Which interfaces the endpoint may listen on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Exposure {
    /// Loopback only (127.0.0.1, ::1): a scraper on the same machine.
    #[default]
    Loopback,
    /// Any interface, for a scraper on another machine: the metrics name
    /// datasets and shards, so this is an explicit choice.
    AnyInterface,
}

/// A running `/metrics` endpoint; dropping it stops the server.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// The address it listens on (with the port chosen, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Encodes an observer's snapshots on each scrape.
#[derive(Debug)]
struct Snapshots(Observer);

fn counter<N>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: &[(Vec<(&'static str, String)>, N)],
) -> std::fmt::Result
where
    N: prometheus_client::encoding::EncodeCounterValue + Copy + Default + std::fmt::Debug,
{
    let kind = ConstCounter::new(N::default()).metric_type();
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in series {
        ConstCounter::new(*v).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: &[(Vec<(&'static str, String)>, f64)],
) -> std::fmt::Result {
    let kind = ConstGauge::new(0.0).metric_type();
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in series {
        ConstGauge::new(*v).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

type Labels = Vec<(&'static str, String)>;
type OpField<N> = fn(&OperatorMetrics) -> N;
type IoField<N> = fn(&IoStats) -> N;

const OP_COUNTS: [(&str, &str, OpField<u64>); 4] = [
    (
        "zephon_operator_elements_in",
        "Elements the operator consumed.",
        |o| o.elements_in,
    ),
    (
        "zephon_operator_elements_out",
        "Elements the operator produced.",
        |o| o.elements_out,
    ),
    (
        "zephon_operator_bytes_in",
        "Payload bytes the operator consumed.",
        |o| o.bytes_in,
    ),
    (
        "zephon_operator_bytes_out",
        "Payload bytes the operator produced.",
        |o| o.bytes_out,
    ),
];

const OP_SECONDS: [(&str, &str, OpField<f64>); 3] = [
    (
        "zephon_operator_busy_seconds",
        "Seconds of the operator's own work, over its workers.",
        |o| o.busy_s,
    ),
    (
        "zephon_operator_wait_input_seconds",
        "Seconds the operator waited for its input.",
        |o| o.wait_input_s,
    ),
    (
        "zephon_operator_blocked_output_seconds",
        "Seconds finished output waited for the next stage.",
        |o| o.blocked_output_s,
    ),
];

const OP_GAUGES: [(&str, &str, OpField<Option<f64>>); 4] = [
    (
        "zephon_operator_queue_depth_max",
        "Deepest the operator's queue has been.",
        |o| Some(o.max_queue_depth as f64),
    ),
    (
        "zephon_operator_queue_capacity",
        "The operator's queue capacity, where it has one.",
        |o| o.queue_capacity.map(|c| c as f64),
    ),
    (
        "zephon_operator_busy_ratio",
        "Busy seconds over elapsed seconds times parallelism.",
        |o| Some(o.busy_ratio),
    ),
    (
        "zephon_operator_parallelism",
        "Workers or requests in flight the operator may use.",
        |o| Some(o.parallelism as f64),
    ),
];

const IO_COUNTS: [(&str, &str, IoField<u64>); 6] = [
    (
        "zephon_storage_cache_hits",
        "Shard requests served from the cache.",
        |s| s.cache_hits,
    ),
    (
        "zephon_storage_cache_misses",
        "Shard requests that downloaded.",
        |s| s.cache_misses,
    ),
    (
        "zephon_storage_failures",
        "Failed downloads or reads.",
        |s| s.failures,
    ),
    ("zephon_storage_retries", "Retried storage requests.", |s| {
        s.retries
    }),
    (
        "zephon_storage_downloaded_bytes",
        "Bytes downloaded.",
        |s| s.bytes_downloaded,
    ),
    (
        "zephon_storage_evictions",
        "Evictions from the cache.",
        |s| s.evictions,
    ),
];

/// A mixture schedule's series: the phase the work source is in, and per
/// phase and dataset the target share and the samples handed out.
fn schedule(e: &mut DescriptorEncoder<'_>, s: &zephon_metrics::PhaseShares) -> std::fmt::Result {
    if let Some(c) = s.current {
        gauge(
            e,
            "zephon_schedule_phase",
            "The mixture schedule's phase the work source is in (from 1).",
            &[(vec![], (c + 1) as f64)],
        )?;
    }
    let cell = |p: usize, d: &zephon_metrics::DatasetShare| -> Labels {
        vec![("phase", (p + 1).to_string()), ("dataset", d.name.clone())]
    };
    let targets: Vec<_> = s
        .phases
        .iter()
        .enumerate()
        .flat_map(|(p, ph)| ph.datasets.iter().map(move |d| (cell(p, d), d.target)))
        .collect();
    gauge(
        e,
        "zephon_schedule_target_share",
        "A dataset's target share of a schedule phase's samples.",
        &targets,
    )?;
    let handed: Vec<_> = s
        .phases
        .iter()
        .enumerate()
        .flat_map(|(p, ph)| ph.datasets.iter().map(move |d| (cell(p, d), d.handed_out)))
        .collect();
    counter(
        e,
        "zephon_schedule_samples",
        "Samples of a dataset the work source handed out in a schedule phase.",
        &handed,
    )
}

impl Collector for Snapshots {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> std::fmt::Result {
        let m = self.0.metrics_snapshot();
        let f = self.0.fetch_timing_snapshot();
        let op = |o: &OperatorMetrics| -> Labels {
            vec![
                ("operator", o.name.clone()),
                ("position", o.position.to_string()),
            ]
        };
        for (name, help, v) in OP_COUNTS {
            let series: Vec<_> = m.operators.iter().map(|o| (op(o), v(o))).collect();
            counter(&mut e, name, help, &series)?;
        }
        for (name, help, v) in OP_SECONDS {
            let series: Vec<_> = m.operators.iter().map(|o| (op(o), v(o))).collect();
            counter(&mut e, name, help, &series)?;
        }
        for (name, help, v) in OP_GAUGES {
            let series: Vec<_> = m
                .operators
                .iter()
                .filter_map(|o| Some((op(o), v(o)?)))
                .collect();
            gauge(&mut e, name, help, &series)?;
        }

        let s = &m.startup;
        counter(
            &mut e,
            "zephon_consumer_batches",
            "Elements delivered to the consumer.",
            &[(vec![], s.batches)],
        )?;
        counter(
            &mut e,
            "zephon_consumer_wait_seconds",
            "Seconds the consumer waited for the pipeline.",
            &[(vec![], s.consumer_wait_s)],
        )?;
        counter(
            &mut e,
            "zephon_consumer_busy_seconds",
            "Seconds the consumer spent on its own work.",
            &[(vec![], s.consumer_busy_s)],
        )?;
        if let Some(t) = s.time_to_first_batch_s {
            gauge(
                &mut e,
                "zephon_time_to_first_batch_seconds",
                "Seconds from the start to the first element.",
                &[(vec![], t)],
            )?;
        }
        gauge(
            &mut e,
            "zephon_elapsed_seconds",
            "Seconds since iteration started.",
            &[(vec![], m.elapsed_s)],
        )?;

        let mut datasets: BTreeMap<&str, [u64; 3]> = BTreeMap::new();
        for sh in &f.per_shard {
            let d = datasets.entry(sh.dataset.as_str()).or_default();
            d[0] += sh.samples;
            d[1] += sh.cache_hits;
            d[2] += sh.cache_misses;
        }
        for (i, (name, help)) in [
            (
                "zephon_dataset_samples",
                "Samples fetched from the dataset.",
            ),
            (
                "zephon_dataset_group_cache_hits",
                "Fetch groups served without waiting for a download.",
            ),
            (
                "zephon_dataset_group_cache_misses",
                "Fetch groups that waited for a shard to open or download.",
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let series: Vec<_> = datasets
                .iter()
                .map(|(d, v)| (vec![("dataset", (*d).to_owned())], v[i]))
                .collect();
            counter(&mut e, name, help, &series)?;
        }
        if let Some(sch) = &m.schedule {
            schedule(&mut e, sch)?;
        }
        let storage = |n: &String| -> Labels { vec![("storage", n.clone())] };
        for (name, help, v) in IO_COUNTS {
            let series: Vec<_> = f.storage.iter().map(|(n, s)| (storage(n), v(s))).collect();
            counter(&mut e, name, help, &series)?;
        }
        let series: Vec<_> = f
            .storage
            .iter()
            .map(|(n, s)| (storage(n), s.download_s))
            .collect();
        counter(
            &mut e,
            "zephon_storage_download_seconds",
            "Seconds spent downloading.",
            &series,
        )?;
        Ok(())
    }
}

impl Observer {
    /// The metrics as one scrape would read them, in the OpenMetrics text
    /// format (what [`serve_prometheus`](Self::serve_prometheus) answers).
    ///
    /// ```
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, Tracking, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 8]])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).build()?;
    /// let mut it = ws.stream().fetch(2).batch(4).into_blocking_iter(Runner::Inline)?;
    /// let obs = it.enable_observability(Tracking::Operator);
    /// assert_eq!(it.by_ref().count(), 2);
    /// let text = obs.prometheus_text();
    /// assert!(text.contains(r#"zephon_operator_elements_out_total{operator="batch",position="1"} 2"#), "{text}");
    /// assert!(text.contains(r#"zephon_dataset_samples_total{dataset="toy"} 8"#), "{text}");
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn prometheus_text(&self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Snapshots(self.clone())));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }

    /// Serves the metrics at `http://ADDR/metrics` for a Prometheus server
    /// (or any OpenMetrics scraper) to read, until the returned server is
    /// dropped. `addr` is `host:port` (port 0 picks a free one); with
    /// [`Exposure::Loopback`] it must be a loopback address. An address
    /// that does not parse, is in use, or is not on an allowed interface is
    /// an error naming `metrics_addr`.
    ///
    /// ```
    /// use zephon_core::obs::Exposure;
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, Tracking, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 8]])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).build()?;
    /// let mut it = ws.stream().fetch(2).batch(4).into_blocking_iter(Runner::Inline)?;
    /// let obs = it.enable_observability(Tracking::Operator);
    /// let server = obs.serve_prometheus("127.0.0.1:0", Exposure::Loopback)?;
    /// assert!(server.addr().ip().is_loopback());
    /// let e = obs.serve_prometheus("0.0.0.0:0", Exposure::Loopback).unwrap_err();
    /// assert!(e.to_string().contains("metrics_addr"), "{e}");
    /// let e = obs.serve_prometheus(&server.addr().to_string(), Exposure::Loopback).unwrap_err();
    /// assert!(e.to_string().contains("in use"), "{e}");
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn serve_prometheus(&self, addr: &str, exposure: Exposure) -> Result<MetricsServer> {
        let resolved: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|e| Error::config(KEY, format!("`{addr}` is not a host:port address: {e}")))?
            .collect();
        let Some(&at) = resolved.first() else {
            return Err(Error::config(
                KEY,
                format!("`{addr}` resolves to no address"),
            ));
        };
        if exposure == Exposure::Loopback && !at.ip().is_loopback() {
            return Err(Error::config(
                KEY,
                format!(
                    "`{addr}` is not a loopback address; metrics are served on loopback \
                     unless any interface is allowed (Exposure::AnyInterface, `--metrics-public`)"
                ),
            ));
        }
        let listener = std::net::TcpListener::bind(at).map_err(|e| {
            let why = match e.kind() {
                std::io::ErrorKind::AddrInUse => "is in use".to_owned(),
                _ => format!("cannot be listened on: {e}"),
            };
            Error::config(KEY, format!("`{addr}` {why}"))
        })?;
        let bound = listener
            .local_addr()
            .map_err(|e| Error::config(KEY, format!("`{addr}`: {e}")))?;
        let server = tiny_http::Server::from_listener(listener, None)
            .map_err(|e| Error::config(KEY, format!("`{addr}`: {e}")))?;
        let server = Arc::new(server);
        let stop = Arc::new(AtomicBool::new(false));
        let (srv, halt, obs) = (server.clone(), stop.clone(), self.clone());
        let thread = std::thread::Builder::new()
            .name("zephon-metrics".into())
            .spawn(move || {
                while !halt.load(Ordering::Relaxed) {
                    let Ok(Some(request)) = srv.recv_timeout(Duration::from_millis(200)) else {
                        continue;
                    };
                    let response = if request.url() == "/metrics" {
                        let content = "application/openmetrics-text; version=1.0.0; charset=utf-8";
                        tiny_http::Response::from_string(obs.prometheus_text()).with_header(
                            tiny_http::Header::from_bytes("Content-Type", content)
                                .expect("a valid header"),
                        )
                    } else {
                        tiny_http::Response::from_string("metrics are at /metrics\n")
                            .with_status_code(404)
                    };
                    // A scraper that went away is its own business.
                    let _ = request.respond(response);
                }
            })
            .map_err(|e| Error::config(KEY, format!("cannot start the metrics thread: {e}")))?;
        Ok(MetricsServer {
            addr: bound,
            stop,
            server,
            thread: Some(thread),
        })
    }
}
