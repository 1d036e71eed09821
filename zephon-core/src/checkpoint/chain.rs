//! The operator chain a checkpoint is bound to: the data-shaping stages of
//! the pipeline as built, in order, as `explain()` describes them.

use super::progress::Progress;
use crate::error::{Error, Result};
use crate::hash;
use crate::obs::StageDescription;
use std::collections::BTreeMap;

/// Names of the recipe settings that record the chain: `chain NNN NAME`,
/// one per data-shaping stage from the source, valued by the hash of the
/// stage's [`data`](StageDescription::data).
pub const CHAIN_PREFIX: &str = "chain ";

/// One data-shaping stage: its setting's name, hash, and words.
struct Link {
    key: String,
    name: String,
    hash: u64,
    data: String,
}

fn links(stages: &[StageDescription]) -> Vec<Link> {
    stages
        .iter()
        .filter_map(|s| Some((s, s.data.as_ref()?)))
        .enumerate()
        .map(|(i, (s, data))| Link {
            key: format!("{CHAIN_PREFIX}{i:03} {}", s.name),
            name: s.name.clone(),
            hash: hash::combine(hash::bytes(s.name.as_bytes()), hash::bytes(data.as_bytes())),
            data: data.clone(),
        })
        .collect()
}

/// The stage named by a chain setting's key (`chain 003 shuffle` ->
/// `shuffle`).
fn stage_name(key: &str) -> &str {
    key.splitn(3, ' ').nth(2).unwrap_or(key)
}

/// The chain settings of `settings`, in stage order.
pub(crate) fn recorded(settings: &BTreeMap<String, u64>) -> Vec<(&str, u64)> {
    settings
        .range(CHAIN_PREFIX.to_owned()..)
        .take_while(|(k, _)| k.starts_with(CHAIN_PREFIX))
        .map(|(k, v)| (k.as_str(), *v))
        .collect()
}

impl Progress {
    /// Binds this progress to the pipeline described by `stages`: a fresh
    /// run (or one resumed from a checkpoint that recorded no chain)
    /// records the chain, so its checkpoints carry it; a run resumed from a
    /// checkpoint that recorded one must have the same chain, or it is
    /// refused naming the first stage that differs.
    pub(crate) fn bind_chain(&mut self, stages: &[StageDescription]) -> Result<()> {
        let ours = links(stages);
        let theirs: Vec<(String, u64)> = recorded(self.recipe().settings())
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        if theirs.is_empty() {
            for l in &ours {
                self.recipe_mut().insert_hashed(&l.key, l.hash);
            }
            return Ok(());
        }
        let refuse = |message: String| Error::Checkpoint {
            origin: "resume".into(),
            message: format!(
                "{message}; a checkpoint resumes only into the operator chain it was taken from \
                 (parallelism, queue sizes, prefetch and micro-batch sizes may change)"
            ),
        };
        for i in 0..ours.len().max(theirs.len()) {
            match (ours.get(i), theirs.get(i)) {
                (Some(o), Some((key, h))) if o.key == *key && o.hash == *h => {}
                (Some(o), Some((key, _))) if o.key == *key => {
                    return Err(refuse(format!(
                        "pipeline stage {i} `{}`: its settings ({}) differ from the checkpointed run's",
                        o.name, o.data
                    )));
                }
                (Some(o), Some((key, _))) => {
                    return Err(refuse(format!(
                        "pipeline stage {i} is `{}` here but `{}` in the checkpointed run",
                        o.name,
                        stage_name(key)
                    )));
                }
                (Some(o), None) => {
                    return Err(refuse(format!(
                        "pipeline stage {i} `{}` is not in the checkpointed run's pipeline",
                        o.name
                    )));
                }
                (None, Some((key, _))) => {
                    return Err(refuse(format!(
                        "the checkpointed run's pipeline has a stage {i} `{}` that this one lacks",
                        stage_name(key)
                    )));
                }
                (None, None) => unreachable!("the loop runs to the longer chain"),
            }
        }
        Ok(())
    }
}
