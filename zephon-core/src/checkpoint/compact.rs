//! The binary form of a checkpoint's lane cuts: each operator's JSON state
//! as a flat list of tokens. Operator names, strings and the key lists of
//! objects (their *shapes*) are written once per checkpoint rather than
//! once per lane, and arrays of unsigned integers as plain lists, so a cut
//! costs a few dozen bytes per lane, close to what a fixed set of operator
//! variants took. The JSON form writes the cuts as they are.

use super::cut::{LaneCut, OpLaneCut, OpState, Preamble};
use crate::pointer::LaneId;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Nesting a state may have, as in `serde_json`'s own parser.
const MAX_DEPTH: usize = 128;

/// One token of a state, in document order.
#[derive(Debug, Serialize, Deserialize)]
enum Tok {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    /// A string: an index into the checkpoint's names.
    Str(u32),
    /// A non-empty array of unsigned integers.
    Uints(Vec<u64>),
    /// An array of this many values (the tokens that follow).
    Array(u64),
    /// An object of this shape (an index into the checkpoint's shapes):
    /// one value follows per key.
    Object(u32),
}

/// One operator's cut, with its name and its state by index.
#[derive(Serialize, Deserialize)]
struct OpBin {
    op: u32,
    consumed: u64,
    emitted: Option<u64>,
    last_identity: Option<u64>,
    preamble: Preamble,
    version: u32,
    state: Vec<Tok>,
}

/// What a checkpoint's states share, each in order of first use: names
/// (operators, keys and strings) and shapes (key lists, as name indices).
#[derive(Default)]
struct Tables {
    names: Vec<String>,
    name_index: BTreeMap<String, u32>,
    shapes: Vec<Vec<u32>>,
    shape_index: BTreeMap<Vec<u32>, u32>,
}

impl Tables {
    fn name(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.name_index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_owned());
        self.name_index.insert(name.to_owned(), i);
        i
    }

    fn shape(&mut self, o: &Map<String, Value>) -> u32 {
        let keys: Vec<u32> = o.keys().map(|k| self.name(k)).collect();
        if let Some(&i) = self.shape_index.get(&keys) {
            return i;
        }
        let i = self.shapes.len() as u32;
        self.shapes.push(keys.clone());
        self.shape_index.insert(keys, i);
        i
    }

    /// `v` as tokens, in document order (iteratively: no recursion on data).
    fn tokens(&mut self, v: &Value) -> Vec<Tok> {
        let mut out = Vec::new();
        let mut stack = vec![v];
        while let Some(v) = stack.pop() {
            match v {
                Value::Null => out.push(Tok::Null),
                Value::Bool(b) => out.push(Tok::Bool(*b)),
                Value::Number(n) => out.push(match (n.as_u64(), n.as_i64()) {
                    (Some(u), _) => Tok::U64(u),
                    (None, Some(i)) => Tok::I64(i),
                    // An `OpState` holds no float (refused where it is built).
                    (None, None) => Tok::Null,
                }),
                Value::String(s) => out.push(Tok::Str(self.name(s))),
                Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_u64) => {
                    out.push(Tok::Uints(a.iter().filter_map(Value::as_u64).collect()));
                }
                Value::Array(a) => {
                    out.push(Tok::Array(a.len() as u64));
                    stack.extend(a.iter().rev());
                }
                Value::Object(o) => {
                    out.push(Tok::Object(self.shape(o)));
                    stack.extend(o.values().rev());
                }
            }
        }
        out
    }
}

/// The value `toks` encode, each of them used exactly once.
fn value(toks: Vec<Tok>, names: &[String], shapes: &[Vec<u32>]) -> Result<Value, String> {
    /// A container being filled: what is still to come, and what came.
    enum Open<'a> {
        Array(u64, Vec<Value>),
        Object(std::slice::Iter<'a, u32>, Map<String, Value>),
    }
    let name = |i: u32| {
        names
            .get(i as usize)
            .ok_or_else(|| format!("a state's name {i} is not among the {} names", names.len()))
    };
    let mut stack: Vec<Open> = Vec::new();
    let mut toks = toks.into_iter();
    loop {
        let tok = toks.next().ok_or("a state ends early")?;
        let mut v = match tok {
            Tok::Null => Value::Null,
            Tok::Bool(b) => Value::Bool(b),
            Tok::U64(u) => Value::from(u),
            Tok::I64(i) => Value::from(i),
            Tok::Str(i) => Value::String(name(i)?.clone()),
            Tok::Uints(v) => Value::Array(v.into_iter().map(Value::from).collect()),
            Tok::Array(_) | Tok::Object(_) if stack.len() >= MAX_DEPTH => {
                return Err(format!("a state nests deeper than {MAX_DEPTH}"));
            }
            Tok::Array(0) => Value::Array(Vec::new()),
            Tok::Array(n) => {
                // Capacity from what arrives, not from the count.
                stack.push(Open::Array(n, Vec::with_capacity(n.min(64) as usize)));
                continue;
            }
            Tok::Object(s) => {
                let keys = shapes.get(s as usize).ok_or_else(|| {
                    format!(
                        "a state's shape {s} is not among the {} shapes",
                        shapes.len()
                    )
                })?;
                if keys.is_empty() {
                    Value::Object(Map::new())
                } else {
                    stack.push(Open::Object(keys.iter(), Map::new()));
                    continue;
                }
            }
        };
        // Put `v` into its container, closing every container it fills.
        loop {
            match stack.last_mut() {
                None => {
                    if toks.next().is_some() {
                        return Err("a state has tokens after its value".into());
                    }
                    return Ok(v);
                }
                Some(Open::Array(left, items)) => {
                    items.push(v);
                    *left -= 1;
                    if *left > 0 {
                        break;
                    }
                }
                Some(Open::Object(keys, map)) => {
                    // A shape is never empty here: it holds a key per value.
                    let k = name(*keys.next().unwrap_or(&u32::MAX))?;
                    if map.insert(k.clone(), v).is_some() {
                        return Err(format!("a state's object repeats the key `{k}`"));
                    }
                    if !keys.as_slice().is_empty() {
                        break;
                    }
                }
            }
            v = match stack.pop() {
                Some(Open::Array(_, items)) => Value::Array(items),
                Some(Open::Object(_, map)) => Value::Object(map),
                None => unreachable!("the stack had a last element"),
            };
        }
    }
}

/// The binary form of the cuts: the tables, then per lane its operators.
type Bin = (Vec<String>, Vec<Vec<u32>>, Vec<(LaneId, Vec<OpBin>)>);

/// `#[serde(with)]` for [`Checkpoint::cuts`](super::Checkpoint::cuts).
pub(super) fn serialize<S: Serializer>(
    cuts: &BTreeMap<LaneId, LaneCut>,
    s: S,
) -> Result<S::Ok, S::Error> {
    if s.is_human_readable() {
        return cuts.serialize(s);
    }
    let mut t = Tables::default();
    let lanes: Vec<(LaneId, Vec<OpBin>)> = cuts
        .iter()
        .map(|(&lane, cut)| {
            let ops = cut
                .ops
                .iter()
                .map(|o| OpBin {
                    op: t.name(&o.op),
                    consumed: o.consumed,
                    emitted: o.emitted,
                    last_identity: o.last_identity,
                    preamble: o.preamble.clone(),
                    version: o.state.version(),
                    state: t.tokens(o.state.value()),
                })
                .collect();
            (lane, ops)
        })
        .collect();
    (t.names, t.shapes, lanes).serialize(s)
}

/// `#[serde(with)]` for [`Checkpoint::cuts`](super::Checkpoint::cuts).
pub(super) fn deserialize<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<LaneId, LaneCut>, D::Error> {
    if d.is_human_readable() {
        return BTreeMap::deserialize(d);
    }
    let (names, shapes, lanes) = Bin::deserialize(d)?;
    let mut cuts = BTreeMap::new();
    for (lane, ops) in lanes {
        let ops = ops
            .into_iter()
            .map(|o| {
                let op = names
                    .get(o.op as usize)
                    .ok_or_else(|| {
                        format!(
                            "operator name {} is not among the {} names",
                            o.op,
                            names.len()
                        )
                    })?
                    .clone();
                let state = OpState::from_value(o.version, value(o.state, &names, &shapes)?)?;
                Ok(OpLaneCut {
                    op,
                    consumed: o.consumed,
                    emitted: o.emitted,
                    last_identity: o.last_identity,
                    preamble: o.preamble,
                    state,
                })
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(D::Error::custom)?;
        if cuts.insert(lane, LaneCut { ops }).is_some() {
            return Err(D::Error::custom(format!("lane {lane} has two cuts")));
        }
    }
    Ok(cuts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_tokens() {
        let v = serde_json::json!({
            "a": [1, -2, {"b": null, "c": [true, []]}, {}],
            "d": "text",
            "e": 18446744073709551615u64,
            "f": [3, 4, 18446744073709551615u64],
            "g": ["text", -1, 2],
        });
        let mut t = Tables::default();
        let toks = t.tokens(&v);
        assert_eq!(value(toks, &t.names, &t.shapes).unwrap(), v);
        let others = [
            Value::Null,
            serde_json::json!([]),
            serde_json::json!({}),
            serde_json::json!(7),
            serde_json::json!([{"b": 1}, {"b": 2}]),
        ];
        for v in others {
            let toks = t.tokens(&v);
            assert_eq!(value(toks, &t.names, &t.shapes).unwrap(), v);
        }
        // Objects of one key list share one shape.
        let b = t.name("b");
        assert_eq!(t.shapes.iter().filter(|s| **s == [b]).count(), 1);
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let names = vec!["k".to_string()];
        let shapes = vec![vec![0], vec![0, 0], vec![7]];
        for (toks, want) in [
            (vec![], "ends early"),
            (vec![Tok::Array(2), Tok::Null], "ends early"),
            (vec![Tok::Object(0)], "ends early"),
            (vec![Tok::Null, Tok::Null], "after its value"),
            (vec![Tok::Object(9)], "shape 9 is not among"),
            (vec![Tok::Object(2), Tok::Null], "name 7 is not among"),
            (vec![Tok::Str(1)], "name 1 is not among"),
            (
                vec![Tok::Object(1), Tok::Null, Tok::Null],
                "repeats the key `k`",
            ),
            ((0..200).map(|_| Tok::Array(1)).collect(), "nests deeper"),
        ] {
            let e = value(toks, &names, &shapes).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }
}
