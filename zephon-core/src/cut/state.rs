//! An operator's state in a cut ([`OpState`]), its two serialized forms,
//! and its decoding ([`OpLaneCut::decode_state`]).

use super::OpLaneCut;
use crate::error::{Error, Result};
use crate::pointer::LaneId;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What an operator holds besides its preamble, serialized by the operator
/// itself: a JSON value and the version of its layout, which the operator
/// checks when it takes the state back ([`OpLaneCut::decode_state`]).
///
/// Numbers are integers: a float would not survive the JSON form bit for
/// bit, so [`OpState::new`] refuses one (store `f64::to_bits`). The JSON
/// form of a checkpoint shows the value as it is; the binary form encodes
/// it compactly, with the object keys of all states written once.
///
/// ```
/// use zephon_core::checkpoint::OpState;
/// let s = OpState::new(2, &(7u64, vec![1u32, 2]))?;
/// assert_eq!(s.version(), 2);
/// assert_eq!(s.value(), &serde_json::json!([7, [1, 2]]));
/// assert!(OpState::new(1, &0.5f64).is_err());
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpState {
    version: u32,
    value: serde_json::Value,
}

impl OpState {
    /// `state`, serialized, at layout `version`. Refused when it holds a
    /// float or does not serialize.
    pub fn new<T: Serialize + ?Sized>(version: u32, state: &T) -> Result<Self> {
        let value = serde_json::to_value(state).map_err(|e| state_error(e.to_string()))?;
        Self::from_value(version, value).map_err(state_error)
    }

    /// A state already in JSON form. Refused when it holds a float.
    pub fn from_value(version: u32, value: serde_json::Value) -> std::result::Result<Self, String> {
        if let Some(f) = float_in(&value) {
            return Err(format!(
                "it holds the float {f}, which the JSON form would not keep bit for bit; store f64::to_bits"
            ));
        }
        Ok(OpState { version, value })
    }

    /// Nothing held (version 0, `null`).
    pub fn none() -> Self {
        OpState::default()
    }

    /// The layout version the operator wrote.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The state as JSON.
    pub fn value(&self) -> &serde_json::Value {
        &self.value
    }
}

fn state_error(message: String) -> Error {
    Error::Checkpoint {
        origin: "cut".into(),
        message: format!("an operator state: {message}"),
    }
}

/// A float `v` holds, if it holds one. Taken at every cut, so it only
/// looks: no allocation but the stack of containers still to visit.
fn float_in(v: &serde_json::Value) -> Option<&serde_json::Number> {
    use serde_json::Value as V;
    // What may hold a float; scalars of other kinds are passed over.
    let worth = |x: &&V| x.is_f64() || x.is_array() || x.is_object();
    // Iterative, so a deeply nested value cannot overflow the stack.
    let mut stack: Vec<&V> = Vec::new();
    let mut at = v;
    loop {
        match at {
            V::Number(n) if n.is_f64() => return Some(n),
            V::Array(a) => stack.extend(a.iter().filter(worth)),
            V::Object(o) => stack.extend(o.values().filter(worth)),
            _ => {}
        }
        at = stack.pop()?;
    }
}

/// The JSON form: the version, and the value itself.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StateJson {
    version: u32,
    value: serde_json::Value,
}

impl Serialize for OpState {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            #[derive(Serialize)]
            struct Ref<'a> {
                version: u32,
                value: &'a serde_json::Value,
            }
            Ref {
                version: self.version,
                value: &self.value,
            }
            .serialize(s)
        } else {
            // The binary form is not self-describing: the value as JSON text.
            let text = serde_json::to_string(&self.value).map_err(serde::ser::Error::custom)?;
            (self.version, text).serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for OpState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let (version, value) = if d.is_human_readable() {
            let j = StateJson::deserialize(d)?;
            (j.version, j.value)
        } else {
            let (version, text) = <(u32, String)>::deserialize(d)?;
            let value = serde_json::from_str(&text).map_err(serde::de::Error::custom)?;
            (version, value)
        };
        OpState::from_value(version, value).map_err(serde::de::Error::custom)
    }
}

impl OpLaneCut {
    /// The operator's state as `T`, after checking that the cut is
    /// operator `op`'s and its state of layout `version`: an error naming
    /// the lane, the operator and both versions otherwise.
    pub fn decode_state<T: DeserializeOwned>(
        &self,
        lane: LaneId,
        op: &str,
        version: u32,
    ) -> Result<T> {
        let fail = |message: String| Error::Checkpoint {
            origin: "restore".into(),
            message: format!("{op}, lane {lane}: {message}"),
        };
        if self.op != op {
            return Err(fail(format!(
                "the checkpoint holds the cut of `{}` where this operator is",
                self.op
            )));
        }
        if self.state.version != version {
            return Err(fail(format!(
                "the checkpoint's state is of layout version {}, this build reads version {version}; \
                 restore with the build that wrote it",
                self.state.version
            )));
        }
        serde_json::from_value(self.state.value.clone())
            .map_err(|e| fail(format!("its state does not decode: {e}")))
    }

    /// [`decode_state`](Self::decode_state) for a
    /// [`StateCheck`](super::StateCheck): the error is the message alone,
    /// as a check returns it (whoever runs the check names the checkpoint).
    ///
    /// ```
    /// use zephon_core::checkpoint::cut::{OpLaneCut, OpState};
    /// let mut cut = OpLaneCut::new("running_total", 3);
    /// cut.state = OpState::new(2, &7u64).unwrap();
    /// let total: u64 = cut.check_decode(0, "running_total", 2).unwrap();
    /// assert_eq!(total, 7);
    /// let err = cut.check_decode::<u64>(0, "running_total", 3).unwrap_err();
    /// assert!(err.contains("layout version 2"), "{err}");
    /// ```
    pub fn check_decode<T: DeserializeOwned>(
        &self,
        lane: LaneId,
        op: &str,
        version: u32,
    ) -> std::result::Result<T, String> {
        self.decode_state(lane, op, version).map_err(|e| match e {
            Error::Checkpoint { message, .. } => message,
            e => e.to_string(),
        })
    }
}
