//! Local JSONL datasets: every `*.jsonl` file of a folder is a shard.

use crate::format::jsonl::{LineIndex, parse_run};
use futures::FutureExt;
use futures::future::BoxFuture;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zephon_core::dataset::check_run;
use zephon_core::runner::offload;
use zephon_core::{Dataset, Error, Record, Result, Shard};

/// A JSONL file on local disk, indexed when opened; reads are positioned
/// reads of just the lines asked for.
#[derive(Debug)]
pub struct LocalJsonlShard {
    dataset: String,
    name: String,
    path: PathBuf,
    file: Arc<std::fs::File>,
    index: Arc<LineIndex>,
}

impl LocalJsonlShard {
    /// Opens and indexes `path`.
    pub fn open(dataset: &str, path: &Path) -> Result<Self> {
        let io = |source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        let data = std::fs::read(path).map_err(io)?;
        let file = std::fs::File::open(path).map_err(io)?;
        Ok(LocalJsonlShard {
            dataset: dataset.to_owned(),
            name: path.display().to_string(),
            path: path.to_owned(),
            file: Arc::new(file),
            index: Arc::new(LineIndex::build(&data)),
        })
    }

    /// The line-offset index.
    pub fn index(&self) -> &LineIndex {
        &self.index
    }
}

impl Shard for LocalJsonlShard {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.index.len()
    }

    fn read_run(&self, start: u64, count: u64) -> BoxFuture<'_, Result<Vec<Record>>> {
        if let Err(e) = check_run(&self.dataset, self, start, count) {
            return futures::future::ready(Err(e)).boxed();
        }
        let (from, to) = self.index.byte_range(start, count);
        let file = self.file.clone();
        let (dataset, name, path) = (self.dataset.clone(), self.name.clone(), self.path.clone());
        offload("fetch", move || {
            let mut buf = vec![0u8; (to - from) as usize];
            file.read_exact_at(&mut buf, from)
                .map_err(|source| Error::Io {
                    path: path.display().to_string(),
                    source,
                })?;
            parse_run(&buf, start, &dataset, &name)
        })
        .map(|r| r.and_then(|x| x))
        .boxed()
    }

    /// One hand-off to a worker for the whole group: positioned reads of each
    /// run of adjacent lines, parsed in request order.
    fn read_indices<'a>(&'a self, indices: &'a [u64]) -> BoxFuture<'a, Result<Vec<Record>>> {
        let len = self.len();
        if let Some(&bad) = indices.iter().find(|&&i| i >= len) {
            return futures::future::ready(Err(Error::SampleOutOfRange {
                dataset: self.dataset.clone(),
                shard: self.name.clone(),
                sample: bad,
                len,
            }))
            .boxed();
        }
        let indices = indices.to_vec();
        let (file, index) = (self.file.clone(), self.index.clone());
        let (dataset, name, path) = (self.dataset.clone(), self.name.clone(), self.path.clone());
        offload("fetch", move || {
            let mut out = Vec::with_capacity(indices.len());
            let mut buf = Vec::new();
            let mut i = 0;
            while i < indices.len() {
                // Extend the run while the next index is the next line.
                let mut j = i + 1;
                while j < indices.len() && indices[j] == indices[j - 1] + 1 {
                    j += 1;
                }
                let first = indices[i];
                let (from, to) = index.byte_range(first, (j - i) as u64);
                buf.resize((to - from) as usize, 0);
                file.read_exact_at(&mut buf, from)
                    .map_err(|source| Error::Io {
                        path: path.display().to_string(),
                        source,
                    })?;
                out.extend(parse_run(&buf, first, &dataset, &name)?);
                i = j;
            }
            Ok(out)
        })
        .map(|r| r.and_then(|x| x))
        .boxed()
    }
}

/// Local datasets: `Dataset::from_path(name, dir)`.
pub trait DatasetExt: Sized {
    /// Every `*.jsonl` file in `dir` (sorted by name) is a shard, indexed on
    /// open so samples are addressable by position. A missing, unreadable or
    /// empty folder is an error naming the path.
    ///
    /// ```
    /// use zephon_core::Dataset;
    /// use zephon_storage::DatasetExt;
    /// let dir = std::env::temp_dir().join(format!("zephon-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// std::fs::write(dir.join("a.jsonl"), "{\"text\":\"hi\"}\n{\"text\":\"yo\"}\n").unwrap();
    /// let ds = Dataset::from_path("doc", &dir).unwrap();
    /// assert_eq!(ds.num_samples(), 2);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    fn from_path(name: &str, dir: impl AsRef<Path>) -> Result<Self>;
}

impl DatasetExt for Dataset {
    fn from_path(name: &str, dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let err = |message: String| Error::Dataset {
            dataset: name.to_owned(),
            location: dir.display().to_string(),
            message,
        };
        let entries =
            std::fs::read_dir(dir).map_err(|e| err(format!("cannot read folder: {e}")))?;
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        paths.sort();
        if paths.is_empty() {
            return Err(err("no *.jsonl shards in folder".into()));
        }
        let shards = paths
            .iter()
            .map(|p| LocalJsonlShard::open(name, p).map(|s| Arc::new(s) as Arc<dyn Shard>))
            .collect::<Result<Vec<_>>>()?;
        Dataset::new(name, dir.display().to_string(), shards)
    }
}
