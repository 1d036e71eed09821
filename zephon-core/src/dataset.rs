//! Datasets, the [`Shard`] trait and an in-memory shard.

use crate::error::{Error, Result};
use crate::pointer::SamplePtr;
use crate::record::{Lineage, Record};
use futures::future::BoxFuture;
use std::fmt;
use std::sync::Arc;

/// A shard: a sequence of samples with a known count, read on request.
///
/// Implementations return records with fields only; `fetch` fills in lane and
/// lineage. Reading must be deterministic: the same index gives the same record.
pub trait Shard: Send + Sync + fmt::Debug {
    /// The shard's path or URI, used in error messages and per-shard metrics.
    fn name(&self) -> &str;

    /// Number of samples.
    fn len(&self) -> u64;

    /// Whether the shard has no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A fingerprint of the shard's content, where the shard knows one: a
    /// manifest's checksum, or a hash of the file's size and of sampled
    /// bytes. A [`Recipe`](crate::checkpoint::Recipe) records it with the
    /// shard's name, so a checkpoint is refused when resumed over data that
    /// changed under it (see [`checkpoint`](crate::checkpoint)). `None`
    /// (the default) records nothing for the shard beyond its sample count.
    fn fingerprint(&self) -> Option<u64> {
        None
    }

    /// A checksum of the shard's whole content, where the shard can compute
    /// one: a local file reads all its bytes (a full read of the shard); a
    /// remote shard gives its manifest's checksum (its
    /// [`fingerprint`](Self::fingerprint)). `Ok(None)` (the default): none.
    /// [`Recipe::verify_content`](crate::checkpoint::Recipe::verify_content)
    /// records it, to catch an edit a fingerprint's sampled bytes miss.
    fn content_checksum(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    /// Reads `count` consecutive samples starting at `start`.
    fn read_run(&self, start: u64, count: u64) -> BoxFuture<'_, Result<Vec<Record>>>;

    /// Reads the samples at `indices`, in that order. The default groups the
    /// indices into runs of consecutive samples and reads each run once.
    fn read_indices<'a>(&'a self, indices: &'a [u64]) -> BoxFuture<'a, Result<Vec<Record>>> {
        Box::pin(async move {
            let mut order: Vec<usize> = (0..indices.len()).collect();
            order.sort_by_key(|&i| indices[i]);
            let mut out: Vec<Option<Record>> = vec![None; indices.len()];
            let mut i = 0;
            while i < order.len() {
                let start = indices[order[i]];
                let mut j = i + 1;
                while j < order.len() && indices[order[j]] <= indices[order[j - 1]] + 1 {
                    j += 1;
                }
                let end = indices[order[j - 1]];
                let run = self.read_run(start, end - start + 1).await?;
                for &k in &order[i..j] {
                    out[k] = Some(run[(indices[k] - start) as usize].clone());
                }
                i = j;
            }
            Ok(out
                .into_iter()
                .map(|r| r.expect("every index filled"))
                .collect())
        })
    }

    /// Reads the samples `ptrs` name (all of this shard), in that order,
    /// each record's lane and lineage set from its pointer: what `fetch`
    /// hands on. The default reads them with
    /// [`read_indices`](Shard::read_indices) and then sets both; a shard
    /// that makes its records itself can set them as it makes each, in one
    /// write rather than a second pass over the records.
    ///
    /// ```
    /// use zephon_core::{InMemoryShard, Record, SamplePtr, Shard};
    /// let shard = InMemoryShard::new("toy", (0..4).map(|i| Record::new().with("i", i as i64)).collect());
    /// let ptr = |sample| SamplePtr { dataset: 0, shard: 0, sample, lane: 1 };
    /// let got = futures::executor::block_on(shard.read_pointers(&[ptr(2), ptr(0)])).unwrap();
    /// assert_eq!(got[0].get("i").and_then(|v| v.as_int()), Some(2));
    /// assert_eq!((got[1].lane, got[1].lineage.as_slice()), (1, &[ptr(0)][..]));
    /// ```
    fn read_pointers<'a>(&'a self, ptrs: &'a [SamplePtr]) -> BoxFuture<'a, Result<Vec<Record>>> {
        Box::pin(async move {
            let indices: Vec<u64> = ptrs.iter().map(|p| p.sample).collect();
            let mut records = self.read_indices(&indices).await?;
            // A count that differs is the caller's to report, with its names.
            for (r, p) in records.iter_mut().zip(ptrs) {
                r.lane = p.lane;
                r.lineage = Lineage::from_buf([*p]);
            }
            Ok(records)
        })
    }

    /// Reads as [`read_pointers`](Shard::read_pointers) does, the records
    /// handed back in consecutive chunks: the first `first` long, each
    /// later one `len` long, the last one what remains. `fetch` asks for
    /// chunks cut where `batch` closes its batches, so a full chunk of one
    /// lane becomes a batch as it is, without moving its records again.
    ///
    /// The cut is a wish: the records, concatenated, are what counts, and
    /// a shard may cut them anywhere. The default reads them with
    /// [`read_pointers`](Shard::read_pointers) into one chunk; a shard
    /// that makes its records itself can make each chunk in place, with
    /// [`PointerChunks`](crate::record::PointerChunks) cutting the chunks
    /// and setting each record's lane and lineage.
    ///
    /// ```
    /// use zephon_core::{InMemoryShard, Record, SamplePtr, Shard};
    /// let shard = InMemoryShard::new("toy", (0..8).map(|i| Record::new().with("i", i as i64)).collect());
    /// let ptrs: Vec<SamplePtr> = (0..7).map(|sample| SamplePtr { dataset: 0, shard: 0, sample, lane: 0 }).collect();
    /// let chunks = futures::executor::block_on(shard.read_pointer_chunks(&ptrs, 1, 3)).unwrap();
    /// assert_eq!(chunks.iter().map(Vec::len).collect::<Vec<_>>(), [1, 3, 3]);
    /// assert_eq!(chunks[1][0].get("i").and_then(|v| v.as_int()), Some(1));
    /// ```
    fn read_pointer_chunks<'a>(
        &'a self,
        ptrs: &'a [SamplePtr],
        first: usize,
        len: usize,
    ) -> BoxFuture<'a, Result<Vec<Vec<Record>>>> {
        let _ = (first, len);
        Box::pin(async move { Ok(vec![self.read_pointers(ptrs).await?]) })
    }

    /// Makes later reads of this shard cheap, e.g. by downloading it into a
    /// cache. Shard prefetching calls this ahead of the reads; a failure there
    /// is not fatal (the read tries again). The default does nothing.
    fn warm(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// Makes later reads of samples `indices` cheap, for shards that are
    /// cached in parts (blocks of a remote shard): shard prefetching calls
    /// this with the samples it sees ahead, in the order they will be read.
    /// A failure is not fatal (the read tries again). The default does
    /// nothing: [`warm`](Shard::warm) covers shards warmed whole.
    fn warm_samples<'a>(&'a self, indices: &'a [u64]) -> BoxFuture<'a, Result<()>> {
        let _ = indices;
        Box::pin(std::future::ready(Ok(())))
    }

    /// Whether a read would start without first opening or downloading the
    /// shard (it is local, or in the cache). Fetch counts cache hits and
    /// misses with it, and times [`warm`](Shard::warm) as the open time of a
    /// miss. The default says yes.
    fn is_warm(&self) -> bool {
        true
    }

    /// Counters of the storage behind this shard (its dataset's cache), for
    /// observability. The default has none.
    fn io_stats(&self) -> Option<zephon_metrics::IoStats> {
        None
    }

    /// This shard as [`Any`](std::any::Any), so that code which knows the
    /// crate that made a dataset can reach what only that crate's shard
    /// type knows (a format's own metadata) through the dataset's
    /// `dyn Shard`s. The default is `None`: a shard type opts in by
    /// returning `Some(self)`.
    /// ```
    /// use zephon_core::{Dataset, InMemoryShard, Record, Shard};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new()]]).unwrap();
    /// let shard = ds.shards()[0].as_any().and_then(|a| a.downcast_ref::<InMemoryShard>());
    /// assert_eq!(shard.map(|s| s.len()), Some(1));
    /// ```
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// Checks a run request against a shard's length, with an error naming both.
pub fn check_run(dataset: &str, shard: &dyn Shard, start: u64, count: u64) -> Result<()> {
    let len = shard.len();
    if start.checked_add(count).is_none_or(|end| end > len) {
        return Err(Error::SampleOutOfRange {
            dataset: dataset.to_owned(),
            shard: shard.name().to_owned(),
            sample: start + count.saturating_sub(1),
            len,
        });
    }
    Ok(())
}

/// A named set of shards. Building one does no I/O beyond what the shard
/// constructors did; samples are read only when a pipeline asks.
#[derive(Clone, Debug)]
pub struct Dataset {
    name: Arc<str>,
    location: Arc<str>,
    shards: Vec<Arc<dyn Shard>>,
}

impl Dataset {
    /// A dataset from its shards. `location` (a path or URI) appears in errors.
    pub fn new(
        name: impl Into<String>,
        location: impl Into<String>,
        shards: Vec<Arc<dyn Shard>>,
    ) -> Result<Self> {
        let name: String = name.into();
        let location: String = location.into();
        if shards.is_empty() {
            return Err(Error::Dataset {
                dataset: name,
                location,
                message: "no shards".into(),
            });
        }
        Ok(Dataset {
            name: name.into(),
            location: location.into(),
            shards,
        })
    }

    /// An in-memory dataset, one [`InMemoryShard`] per inner vector.
    ///
    /// ```
    /// use zephon_core::{Dataset, Record};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 3], vec![Record::new(); 2]]).unwrap();
    /// assert_eq!(ds.num_samples(), 5);
    /// ```
    pub fn in_memory(name: impl Into<String>, shards: Vec<Vec<Record>>) -> Result<Self> {
        let name: String = name.into();
        let shards = shards
            .into_iter()
            .enumerate()
            .map(|(i, records)| {
                Arc::new(InMemoryShard::new(format!("memory://{name}/{i}"), records))
                    as Arc<dyn Shard>
            })
            .collect();
        Dataset::new(name.clone(), format!("memory://{name}"), shards)
    }

    /// The dataset's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the dataset lives (path or URI).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The shards, in order.
    pub fn shards(&self) -> &[Arc<dyn Shard>] {
        &self.shards
    }

    /// Total number of samples.
    pub fn num_samples(&self) -> u64 {
        self.shards.iter().map(|s| s.len()).sum()
    }
}

/// The datasets a work source draws from, indexed by `SamplePtr::dataset`.
pub type Catalog = Arc<[Dataset]>;

/// A shard held in memory, for tests and prototyping.
#[derive(Clone, Debug)]
pub struct InMemoryShard {
    name: String,
    records: Arc<[Record]>,
}

impl InMemoryShard {
    /// A shard of the given records.
    pub fn new(name: impl Into<String>, records: Vec<Record>) -> Self {
        InMemoryShard {
            name: name.into(),
            records: records.into(),
        }
    }
}

impl Shard for InMemoryShard {
    fn name(&self) -> &str {
        &self.name
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn len(&self) -> u64 {
        self.records.len() as u64
    }

    fn read_run(&self, start: u64, count: u64) -> BoxFuture<'_, Result<Vec<Record>>> {
        let res = check_run("memory", self, start, count)
            .map(|()| self.records[start as usize..(start + count) as usize].to_vec());
        Box::pin(std::future::ready(res))
    }

    fn read_indices<'a>(&'a self, indices: &'a [u64]) -> BoxFuture<'a, Result<Vec<Record>>> {
        // Checked first, so the copy is one loop into a buffer of the
        // right size (collecting `Result`s grows it as it goes).
        let res = match indices.iter().find(|&&i| i >= self.len()) {
            Some(&i) => Err(Error::SampleOutOfRange {
                dataset: "memory".into(),
                shard: self.name.clone(),
                sample: i,
                len: self.len(),
            }),
            None => Ok(indices
                .iter()
                .map(|&i| copy_record(&self.records[i as usize]))
                .collect()),
        };
        Box::pin(std::future::ready(res))
    }

    fn read_pointers<'a>(&'a self, ptrs: &'a [SamplePtr]) -> BoxFuture<'a, Result<Vec<Record>>> {
        let res = self
            .check_pointers(ptrs)
            .map(|()| ptrs.iter().map(|p| self.make(p)).collect());
        Box::pin(std::future::ready(res))
    }

    fn read_pointer_chunks<'a>(
        &'a self,
        ptrs: &'a [SamplePtr],
        first: usize,
        len: usize,
    ) -> BoxFuture<'a, Result<Vec<Vec<Record>>>> {
        let res = self.check_pointers(ptrs).map(|()| {
            let (head, rest) = ptrs.split_at(first.max(1).min(ptrs.len()));
            std::iter::once(head)
                .chain(rest.chunks(len.max(1)))
                .filter(|c| !c.is_empty())
                .map(|c| self.make_all(c))
                .collect()
        });
        Box::pin(std::future::ready(res))
    }
}

impl InMemoryShard {
    /// Checks that every pointer names a sample of this shard.
    fn check_pointers(&self, ptrs: &[SamplePtr]) -> Result<()> {
        match ptrs.iter().find(|p| p.sample >= self.len()) {
            Some(p) => Err(Error::SampleOutOfRange {
                dataset: "memory".into(),
                shard: self.name.clone(),
                sample: p.sample,
                len: self.len(),
            }),
            None => Ok(()),
        }
    }

    /// The records `ptrs` name, each made in its place in the buffer: built
    /// aside and then moved in, a record's fields were written twice.
    fn make_all(&self, ptrs: &[SamplePtr]) -> Vec<Record> {
        let mut out: Vec<Record> = Vec::with_capacity(ptrs.len());
        for (slot, p) in out.spare_capacity_mut().iter_mut().zip(ptrs) {
            let fields = &self.records[p.sample as usize].fields;
            let r = slot.as_mut_ptr();
            // SAFETY: `r` points at an unused slot of `out`'s buffer, and
            // each field of the record there is written once. A panic
            // before `set_len` leaks the records made so far, nothing more.
            unsafe {
                (&raw mut (*r).fields).write(fields.clone());
                (&raw mut (*r).lane).write(p.lane);
                (&raw mut (*r).lineage).write(Lineage::from_buf([*p]));
            }
        }
        // SAFETY: the loop above made the first `ptrs.len()` records.
        unsafe { out.set_len(ptrs.len()) };
        out
    }

    /// The record `p` names, made whole in one write: lane and lineage from
    /// its pointer, its stored lineage (if any) never copied.
    #[inline]
    fn make(&self, p: &SamplePtr) -> Record {
        Record {
            lane: p.lane,
            lineage: Lineage::from_buf([*p]),
            fields: self.records[p.sample as usize].fields.clone(),
        }
    }
}

/// A copy of `r`; a record stored without lineage (fetch sets it) gets an
/// empty one without cloning it: a small vector's clone is an extend, which
/// cost as much as copying the record's fields.
#[inline]
fn copy_record(r: &Record) -> Record {
    if r.lineage.is_empty() {
        Record {
            lane: r.lane,
            lineage: crate::record::Lineage::new(),
            fields: r.fields.clone(),
        }
    } else {
        r.clone()
    }
}

// Naming a failed sample's dataset and shard needs the catalog: it lives
// here, so the error module imports nothing of datasets.
impl crate::error::SampleSource {
    /// Looks the pointer's dataset and shard up in `catalog`.
    pub fn resolve(&mut self, catalog: &Catalog) {
        if let Some(p) = self.ptr
            && let Some(ds) = catalog.get(p.dataset as usize)
            && let Some(shard) = ds.shards().get(p.shard as usize)
        {
            self.names = Some(Box::new((ds.name().to_owned(), shard.name().to_owned())));
        }
    }
}

impl Error {
    /// Names the dataset and shard of a [`Error::Sample`] from `catalog`
    /// (the work source's), where the operator that failed knew only the
    /// sample's pointer; other errors are returned as they are.
    ///
    /// ```
    /// use zephon_core::{Dataset, Error, PipelineExt, Record, Runner, WorkSource};
    /// use zephon_core::error::SampleSource;
    /// let ds = Dataset::in_memory("web", vec![vec![Record::new(); 2]]).unwrap();
    /// let ws = WorkSource::builder().dataset(ds, 1.0).build().unwrap();
    /// let catalog = ws.catalog().clone();
    /// let mut it = ws.stream().fetch(1)
    ///     .map_par(|r: Record| Err::<Record, _>(Error::Sample {
    ///         op: "check", sample: SampleSource::new(r.source().copied()), message: "bad".into(),
    ///     }), 1)
    ///     .into_blocking_iter(Runner::Inline).unwrap();
    /// let e = it.next().unwrap().unwrap_err().name_sources(&catalog).to_string();
    /// assert!(e.starts_with("operator `check`: dataset `web`, shard `"), "{e}");
    /// ```
    pub fn name_sources(mut self, catalog: &Catalog) -> Self {
        if let Error::Sample { sample, .. } = &mut self {
            sample.resolve(catalog);
        }
        self
    }
}
