//! Packing's part in a checkpoint, through zephon-core's open lane-cut
//! protocol (see [`zephon_core::checkpoint::cut`]), as any crate's operator
//! takes part: a lane's finished-but-not-taken rows and open bins as
//! pieces of documents (token ranges), the documents themselves as the
//! preamble (their pointers), and putting them back from the re-read
//! documents on restore.

use super::bins::BinPacker;
use super::wrap::{BestFitWrapPacker, WrapPacker};
use super::{LaneState, PackAlgorithm, Packer, Row, RowPiece, Seq};
use crate::fields;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use zephon_core::checkpoint::PtrList;
use zephon_core::checkpoint::cut::{CutContext, CutSource, OpLaneCut, OpState, Preamble};
use zephon_core::{Error, LaneId, Lineage, Record, Result, SamplePtr, Value};

/// The name packing registers under.
pub(crate) const NAME: &str = "pack_sequences";

/// Layout version of [`PackState`]: 2 added the candidates' ages and the
/// homogeneity groups; a cut of version 1 is refused (its pool's ages are
/// unknown).
pub(crate) const STATE_VERSION: u32 = 2;

/// Tokens `start..end` of document `doc` (an index into the cut's
/// preamble), written `[doc, start, end]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Piece(u32, u32, u32);

impl Piece {
    pub(crate) fn doc(self) -> u32 {
        self.0
    }
    pub(crate) fn start(self) -> u32 {
        self.1
    }
    pub(crate) fn end(self) -> u32 {
        self.2
    }
}

/// Open pieces by homogeneity group: (key, pieces).
pub(crate) type GroupPieces = Vec<(String, Vec<Piece>)>;

/// The ready rows and the open pieces of a packing cut, by group (`None`
/// for a cut that is not packing's, or of another layout).
pub(crate) fn cut_pieces(lane: LaneId, cut: &OpLaneCut) -> Option<(Vec<Vec<Piece>>, GroupPieces)> {
    let s: PackState = cut.decode_state(lane, NAME, STATE_VERSION).ok()?;
    let open = s
        .by_group()
        .into_iter()
        .map(|(g, p, _)| (g, p.to_vec()))
        .collect();
    Some((s.ready, open))
}

/// What a packing cut holds besides its preamble (the documents, each by
/// its pointer): rows ready to leave, then the open bins or pool, in the
/// packer's own layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PackState {
    /// Finished rows not yet handed downstream, oldest first.
    ready: Vec<Vec<Piece>>,
    /// The open state.
    open: Vec<Piece>,
    /// `best_fit_wrap`: per piece of `open`, the documents that arrived
    /// after it (empty for the other algorithms).
    ages: Vec<u64>,
    /// With `group_field`: each group's key and how many pieces of `open`
    /// (and of `ages`) are its, in order; empty without.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    groups: Vec<(String, u32)>,
}

impl PackState {
    /// `open` and `ages` cut by group: (key, pieces, ages).
    fn by_group(&self) -> Vec<(String, &[Piece], &[u64])> {
        if self.groups.is_empty() {
            return vec![(String::new(), &self.open[..], &self.ages[..])];
        }
        let mut at = 0;
        self.groups
            .iter()
            .map(|(g, n)| {
                let end = (at + *n as usize).min(self.open.len());
                let ages = self.ages.get(at..end).unwrap_or_default();
                let part = (g.clone(), &self.open[at..end], ages);
                at = end;
                part
            })
            .collect()
    }
}

/// Rows no longer than this run's `max_length`, ready or open: `wrap` fills
/// its open row up to `max_length - len` more tokens, which an overfull
/// row turned into an underflow (a row that never closed, taking in the
/// whole lane), and the bin packers place pieces no longer than a row.
fn check_lengths(s: &PackState, c: &super::PackConfig) -> std::result::Result<(), String> {
    let tokens = |pieces: &[Piece]| -> u64 {
        pieces
            .iter()
            .map(|p| u64::from(p.end().saturating_sub(p.start())))
            .sum()
    };
    let max = c.max_length as u64;
    if let Some((i, n)) = s
        .ready
        .iter()
        .map(|r| tokens(r))
        .enumerate()
        .find(|&(_, n)| n > max)
    {
        return Err(format!(
            "ready row {i} holds {n} tokens, more than max_length {max}"
        ));
    }
    for (group, open, _) in s.by_group() {
        let too_long = match c.algorithm {
            PackAlgorithm::Wrap => Some(tokens(open)).filter(|&n| n > max),
            PackAlgorithm::FirstFit | PackAlgorithm::BestFit => {
                open.iter().map(|&p| tokens(&[p])).find(|&n| n > max)
            }
            // Its pool holds whole documents, which it cuts to fit.
            PackAlgorithm::BestFitWrap => None,
        };
        if let Some(n) = too_long {
            return Err(format!(
                "the open state of group {group:?} holds {n} tokens where a row of \
                 max_length {max} takes at most {max}: the checkpoint is of another \
                 max_length, or corrupt"
            ));
        }
    }
    Ok(())
}

/// Every piece of a packing cut is of one of its documents, and a range.
pub(crate) fn check_state(lane: LaneId, cut: &OpLaneCut) -> std::result::Result<(), String> {
    let s: PackState = cut.check_decode(lane, NAME, STATE_VERSION)?;
    check(&s, &cut.preamble)
}

fn check(s: &PackState, p: &Preamble) -> std::result::Result<(), String> {
    if p.computed != 0 || p.in_flight != 0 {
        return Err(format!(
            "a preamble of {} computed and {} in flight: packing lists its documents only",
            p.computed, p.in_flight
        ));
    }
    if !s.ages.is_empty() && s.ages.len() != s.open.len() {
        return Err(format!(
            "{} ages for {} open pieces",
            s.ages.len(),
            s.open.len()
        ));
    }
    let grouped: u64 = s.groups.iter().map(|g| u64::from(g.1)).sum();
    if !s.groups.is_empty() && grouped != s.open.len() as u64 {
        return Err(format!(
            "groups of {grouped} open pieces for {} open pieces",
            s.open.len()
        ));
    }
    let docs = p.listed.len();
    for piece in s.ready.iter().flatten().chain(&s.open) {
        if piece.doc() as usize >= docs || piece.start() > piece.end() {
            return Err(format!(
                "piece {}..{} of document {} (it holds {docs} documents)",
                piece.start(),
                piece.end(),
                piece.doc(),
            ));
        }
    }
    Ok(())
}

fn seq_piece(s: &Seq) -> RowPiece {
    RowPiece::of(&s.lineage, s.offset, s.ids.len())
}

/// `p` as a piece of `docs` (added there if new); `None` for a segment
/// whose lineage is not one document.
fn index(docs: &mut Vec<SamplePtr>, p: &RowPiece) -> Option<Piece> {
    let ptr = p.ptr?;
    let doc = match docs.iter().position(|d| *d == ptr) {
        Some(i) => i,
        None => {
            docs.push(ptr);
            docs.len() - 1
        }
    };
    Some(Piece(doc as u32, p.start, p.end))
}

fn restore_error(lane: LaneId, message: impl Into<String>) -> Error {
    Error::Checkpoint {
        origin: "restore".into(),
        message: format!("pack_sequences, lane {lane}: {}", message.into()),
    }
}

impl Packer {
    /// Keeps what lane cuts need: the documents each lane consumed.
    pub(crate) fn track_cuts(&mut self) {
        self.cutting = true;
    }

    /// What this packer holds for `lane`, as pieces of documents.
    pub(crate) fn lane_cut(&self, lane: LaneId) -> Option<OpLaneCut> {
        let (consumed, last) = self.consumed.get(&lane).copied().unwrap_or((0, 0));
        let mut docs = Vec::new();
        let ready = self
            .out
            .iter()
            .filter(|(r, _)| r.lane == lane)
            .map(|(_, pieces)| pieces.iter().map(|p| index(&mut docs, p)).collect())
            .collect::<Option<Vec<Vec<Piece>>>>()?;
        let mut open: Vec<Piece> = Vec::new();
        let mut ages: Vec<u64> = Vec::new();
        let mut groups: Vec<(String, u32)> = Vec::new();
        let states = self
            .lanes
            .range((lane, String::new())..)
            .take_while(|((l, _), _)| *l == lane);
        for ((_, group), state) in states {
            let pieces: Vec<RowPiece> = match state {
                LaneState::Bins(b) => b.window.iter().map(seq_piece).collect(),
                LaneState::Wrap(w) => w.row.pieces.clone(),
                LaneState::BestFitWrap(p) => {
                    let mut a: Vec<u64> = p.ages.iter().copied().collect();
                    a.resize(p.pool.len(), 0);
                    ages.extend(a);
                    p.pool.iter().map(seq_piece).collect()
                }
            };
            if pieces.is_empty() {
                continue;
            }
            for p in &pieces {
                open.push(index(&mut docs, p)?);
            }
            groups.push((group.clone(), pieces.len() as u32));
        }
        if self.config.group_field.is_none() {
            groups.clear();
        }
        let state = PackState {
            ready,
            open,
            ages,
            groups,
        };
        let state = OpState::new(STATE_VERSION, &state).ok()?;
        Some(
            OpLaneCut::new(NAME, consumed)
                .with_emitted(self.emitted.get(&lane).copied().unwrap_or(0))
                .with_last_identity((consumed > 0).then_some(last))
                .with_preamble(Preamble {
                    listed: PtrList::new(docs),
                    ..Preamble::default()
                })
                .with_state(state),
        )
    }

    /// Puts `lane` back as `cut` says, from its documents re-read and
    /// tokenized (`docs`, in the cut's order).
    pub(crate) fn restore_lane(
        &mut self,
        lane: LaneId,
        cut: &OpLaneCut,
        docs: Vec<Record>,
    ) -> Result<()> {
        let state: PackState = cut.decode_state(lane, NAME, STATE_VERSION)?;
        check(&state, &cut.preamble).map_err(|m| restore_error(lane, m))?;
        check_lengths(&state, &self.config).map_err(|m| restore_error(lane, m))?;
        let ready = &state.ready;
        let ptrs = cut.preamble.listed.to_vec();
        let mut ids: Vec<(Vec<u32>, Lineage)> = Vec::with_capacity(docs.len());
        for (i, mut r) in docs.into_iter().enumerate() {
            let want = ptrs.get(i).map(|p| (p.dataset, p.shard, p.sample));
            let got = match r.lineage.as_slice() {
                [p] => Some((p.dataset, p.shard, p.sample)),
                _ => None,
            };
            if got.is_none() || got != want {
                return Err(restore_error(
                    lane,
                    format!(
                        "document {i} of the checkpoint is {want:?} but {got:?} arrived: the stretch between \
                         the work source and packing is not one-to-one"
                    ),
                ));
            }
            let Some(Ok(t)) = r.take(fields::INPUT_IDS).map(Value::into_token_vec) else {
                return Err(restore_error(
                    lane,
                    format!(
                        "document {i} arrived without `{}` tokens",
                        fields::INPUT_IDS
                    ),
                ));
            };
            ids.push((t, r.lineage));
        }
        let slice = |p: &Piece| -> Result<(&[u32], &Lineage)> {
            let (t, lineage) = ids.get(p.doc() as usize).ok_or_else(|| {
                restore_error(lane, format!("piece of unknown document {}", p.doc()))
            })?;
            let tokens = t.get(p.start() as usize..p.end() as usize).ok_or_else(|| {
                restore_error(
                    lane,
                    format!(
                        "tokens {}..{} of a document of {} tokens: the document's tokens differ from the checkpointed run's \
                         (another tokenizer, or an operator upstream of packing whose output depends on more than its input record \
                         and which does not take part in the checkpoint's cut; see `zephon_core::checkpoint::cut`)",
                        p.start(),
                        p.end(),
                        t.len()
                    ),
                )
            })?;
            Ok((tokens, lineage))
        };
        let c = &self.config;
        let row_of = |pieces: &[Piece]| -> Result<Row> {
            let mut row = Row::with_capacity(c.max_length);
            for p in pieces {
                let (tokens, lineage) = slice(p)?;
                row.push(tokens, lineage, p.start());
            }
            Ok(row)
        };
        for pieces in ready {
            let mut row = row_of(pieces)?;
            let pieces = std::mem::take(&mut row.pieces);
            self.out.push_back((row.into_record(lane), pieces));
        }
        let seqs = |open: &[Piece]| -> Result<Vec<Seq>> {
            open.iter()
                .map(|p| {
                    let (tokens, lineage) = slice(p)?;
                    Ok(Seq {
                        ids: tokens.to_vec(),
                        lineage: lineage.clone(),
                        offset: p.start(),
                    })
                })
                .collect()
        };
        for (group, open, ages) in state.by_group() {
            let restored = match c.algorithm {
                PackAlgorithm::FirstFit | PackAlgorithm::BestFit => {
                    let window = seqs(open)?;
                    let tokens = window.iter().map(|s| s.ids.len()).sum();
                    LaneState::Bins(BinPacker { window, tokens })
                }
                PackAlgorithm::Wrap => LaneState::Wrap(WrapPacker {
                    row: if open.is_empty() {
                        Row::default()
                    } else {
                        row_of(open)?
                    },
                }),
                PackAlgorithm::BestFitWrap => LaneState::BestFitWrap(BestFitWrapPacker {
                    pool: seqs(open)?.into(),
                    ages: ages.iter().copied().collect(),
                }),
            };
            self.lanes.insert((lane, group), restored);
        }
        self.consumed
            .insert(lane, (cut.consumed, cut.last_identity.unwrap_or(0)));
        // The restored ready rows are counted as they are taken again.
        self.emitted.insert(lane, cut.emitted.unwrap_or(0));
        Ok(())
    }
}

/// A packer shared between its operator and the checkpoint board.
#[derive(Debug)]
pub(crate) struct SharedPacker(pub(crate) Mutex<Packer>);

impl CutSource for SharedPacker {
    // The packer's documents are pointers already: below a filter too.
    fn cut(&self, lane: LaneId, _: CutContext) -> Option<OpLaneCut> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lane_cut(lane)
    }
}
