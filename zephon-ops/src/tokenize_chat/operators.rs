//! The functions that `+`, `~` and `*` of a chat template call once
//! `guard` has rewritten them: each measures what it would make, refuses
//! text past [`MAX_STRING_BYTES`], and otherwise gives the engine's own
//! result. Strings and integers are done here; every other operand goes to
//! the engine's operator itself, in an expression of a helper environment.

use super::guard::{ADD, CONCAT, MUL};
use super::limits::{MAX_STRING_BYTES, text_of, too_long};
use minijinja::value::{Rest, ValueKind};
use minijinja::{Environment, Error, Expression, State, Value};
use std::sync::LazyLock;

/// The engine's operators, for the operands not done here.
pub(super) static ENGINE: LazyLock<Environment<'static>> = LazyLock::new(Environment::new);
static ENGINE_ADD: LazyLock<Expression<'static, 'static>> = LazyLock::new(|| {
    ENGINE
        .compile_expression("a + b")
        .expect("a valid expression")
});
static ENGINE_MUL: LazyLock<Expression<'static, 'static>> = LazyLock::new(|| {
    ENGINE
        .compile_expression("a * b")
        .expect("a valid expression")
});

/// Registers the functions of the rewritten operators in `env`: each
/// takes the operands of a chain (`a + b + c`) and folds them from the left,
/// as the operator does.
pub(super) fn register(env: &mut Environment<'_>) {
    env.add_function(ADD, |s: &State, v: Rest<Value>| fold(s, v, add));
    env.add_function(CONCAT, |s: &State, v: Rest<Value>| fold(s, v, concat));
    env.add_function(MUL, |s: &State, v: Rest<Value>| fold(s, v, mul));
}

fn fold(
    state: &State,
    operands: Rest<Value>,
    op: fn(&State, &Value, &Value) -> Result<Value, Error>,
) -> Result<Value, Error> {
    let mut operands = operands.0.into_iter();
    let mut acc = operands.next().unwrap_or_default();
    for next in operands {
        acc = op(state, &acc, &next)?;
    }
    Ok(acc)
}

/// Refuses, as the engine does before it allocates, a result of `bytes`
/// that the budget left cannot pay for (it is charged once returned).
fn ensure_fuel(state: &State, bytes: u64) -> Result<(), Error> {
    match state.fuel_levels() {
        Some((_, left)) if bytes >= left.saturating_mul(64) => state.consume_fuel(u64::MAX),
        _ => Ok(()),
    }
}

/// `a + b` of the engine, evaluated with the two values.
fn engine(expr: &Expression<'static, 'static>, a: &Value, b: &Value) -> Result<Value, Error> {
    expr.eval(minijinja::context! { a => a.clone(), b => b.clone() })
        .map_err(|e| match e.detail() {
            // Without the helper's location: the caller's line is attached.
            Some(detail) => Error::new(e.kind(), detail.to_owned()),
            None => Error::from(e.kind()),
        })
}

/// A plain (not safe) string's text.
fn plain(v: &Value) -> Option<&str> {
    v.as_str().filter(|_| !v.is_safe())
}

/// A string of `a` then `b`, refused past [`MAX_STRING_BYTES`].
fn joined(state: &State, what: &str, a: &str, b: &str) -> Result<Value, Error> {
    let len = a.len().saturating_add(b.len());
    ensure_fuel(state, len as u64)?;
    if len > MAX_STRING_BYTES {
        return Err(too_long(what));
    }
    let mut s = String::with_capacity(len);
    s.push_str(a);
    s.push_str(b);
    Ok(Value::from(s))
}

fn add(state: &State, a: &Value, b: &Value) -> Result<Value, Error> {
    if let (Some(x), Some(y)) = (plain(a), plain(b)) {
        return joined(state, "+", x, y);
    }
    if let (Some(x), Some(y)) = (int(a), int(b))
        && let Some(sum) = x.checked_add(y)
    {
        return Ok(Value::from(sum));
    }
    if a.is_tuple() && b.is_tuple() {
        let slots = a.len().unwrap_or(0).saturating_add(b.len().unwrap_or(0));
        ensure_fuel(state, (slots as u64).saturating_mul(32))?;
    }
    engine(&ENGINE_ADD, a, b)
}

fn concat(state: &State, a: &Value, b: &Value) -> Result<Value, Error> {
    if let (Some(x), Some(y)) = (plain(a), plain(b)) {
        return joined(state, "~", x, y);
    }
    let (x, y) = (text_of(a, "~")?, text_of(b, "~")?);
    let out = joined(state, "~", &x, &y)?;
    Ok(match a.is_safe() && b.is_safe() {
        true => Value::from_safe_string(out.as_str().unwrap_or_default().to_owned()),
        false => out,
    })
}

fn mul(state: &State, a: &Value, b: &Value) -> Result<Value, Error> {
    if let (Some(x), Some(y)) = (int(a), int(b))
        && let Some(product) = x.checked_mul(y)
    {
        return Ok(Value::from(product));
    }
    let (repeated, n) = match int(a) {
        Some(n) => (b, n),
        None => (a, int(b).unwrap_or(0)),
    };
    let n = u64::try_from(n).unwrap_or(0);
    if let Some(s) = repeated.as_str() {
        let len = (s.len() as u64).saturating_mul(n);
        ensure_fuel(state, len)?;
        if len > MAX_STRING_BYTES as u64 {
            return Err(too_long("*"));
        }
    } else if repeated.is_tuple() {
        let slots = (repeated.len().unwrap_or(0) as u64).saturating_mul(n);
        ensure_fuel(state, slots.saturating_mul(32))?;
    }
    engine(&ENGINE_MUL, a, b)
}

/// An integer that is no boolean.
fn int(v: &Value) -> Option<i64> {
    match v.kind() {
        ValueKind::Number if v.is_integer() => v.as_i64(),
        _ => None,
    }
}
