//! The filters that turn a value into text, bounded. The engine converts a
//! filter's text argument with `Display`, without a bound: a list holding
//! itself twice, doubled forty times, ran `upper` until memory ended, and
//! `replace`, `indent`, `join` and `format` make text larger than their
//! input. Each filter here turns its structured arguments into text
//! through `limits::text_of`, refuses a result that could pass
//! [`MAX_STRING_BYTES`], then runs the engine's own filter.

use super::limits::{MAX_STRING_BYTES, check_value, text_of, too_long};
use super::operators::ENGINE;
use minijinja::value::{Rest, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value};

/// The widest field of a `format` filter's `%` specifier (its padding is
/// made at once).
const MAX_PRINTF_WIDTH: usize = 4096;

/// The engine's filters that make text of their arguments, and the name
/// errors give each.
const TEXT_FILTERS: &[(&str, &str)] = &[
    ("upper", "|upper"),
    ("lower", "|lower"),
    ("title", "|title"),
    ("capitalize", "|capitalize"),
    ("trim", "|trim"),
    ("safe", "|safe"),
    ("escape", "|escape"),
    ("e", "|e"),
    ("replace", "|replace"),
    ("indent", "|indent"),
    ("join", "|join"),
    ("format", "|format"),
];

/// Registers the bounded filters in `env`, over the engine's.
pub(super) fn register(env: &mut Environment<'_>) {
    for &(name, what) in TEXT_FILTERS {
        env.add_filter(name, move |args: Rest<Value>| bounded(name, what, args.0));
    }
}

/// The length of `v`'s text, no more than a little past the bound.
fn text_len(v: &Value, what: &str) -> Result<usize, Error> {
    Ok(match v.kind() {
        ValueKind::String => v.as_str().map_or(0, str::len),
        ValueKind::Undefined | ValueKind::None | ValueKind::Bool | ValueKind::Number => 64,
        _ => text_of(v, what)?.len(),
    })
}

/// An argument as the text the filter makes of it: structures are printed
/// here, within the bound (plain values, `join`'s list and `format`'s
/// format string stay as they are).
fn as_text(v: Value, what: &str) -> Result<Value, Error> {
    Ok(match v.kind() {
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable | ValueKind::Plain
            if !v.is_kwargs() =>
        {
            Value::from(text_of(&v, what)?.into_owned())
        }
        _ => v,
    })
}

fn bounded(name: &str, what: &str, mut args: Vec<Value>) -> Result<Value, Error> {
    for (i, a) in args.iter_mut().enumerate() {
        if a.is_kwargs() {
            for key in a.try_iter()? {
                text_len(&a.get_item(&key)?, what)?;
            }
        } else if i == 0 && (name == "join" || name == "format") {
            // A list to join, a format string: taken as they are.
            check_value(a, what)?;
        } else {
            *a = as_text(std::mem::take(a), what)?;
        }
    }
    if most_bytes(name, &args, what)? > MAX_STRING_BYTES as u64 {
        return Err(too_long(what));
    }
    ENGINE.empty_state().apply_filter(name, &args)
}

/// At most how many bytes the filter `name` makes of `args`.
fn most_bytes(name: &str, args: &[Value], what: &str) -> Result<u64, Error> {
    let len = |i: usize| -> Result<u64, Error> {
        args.get(i)
            .filter(|v| !v.is_kwargs())
            .map_or(Ok(0), |v| text_len(v, what).map(|n| n as u64))
    };
    let first = args.first().and_then(Value::as_str).unwrap_or("");
    Ok(match name {
        // Case changes grow a character to at most three times its bytes.
        "upper" | "lower" | "title" | "capitalize" => 3 * len(0)?,
        "trim" | "safe" => len(0)?,
        // `'` becomes `&#x27;`.
        "escape" | "e" => 6 * len(0)?,
        "replace" => {
            let from = args.get(1).and_then(Value::as_str).unwrap_or("");
            let places = match from.is_empty() {
                true => first.chars().count() as u64 + 1,
                false => first.matches(from).count() as u64,
            };
            len(0)? + places * len(2)?
        }
        "indent" => {
            let width = args
                .get(1)
                .cloned()
                .or_else(|| kwarg(args, "width"))
                .unwrap_or_else(|| Value::from(4));
            let width = match width.as_str() {
                Some(s) => s.len() as u64,
                None => width.as_usize().map_or(0, |n| n as u64),
            };
            len(0)? + (first.matches('\n').count() as u64 + 1).saturating_mul(width)
        }
        "join" => {
            let sep = len(1)?;
            let mut total: u64 = 0;
            // What cannot be iterated is the engine's filter's to refuse.
            let items = args.first().and_then(|v| v.try_iter().ok());
            for item in items.into_iter().flatten() {
                total = total.saturating_add(text_len(&item, what)? as u64 + sep);
                if total > MAX_STRING_BYTES as u64 {
                    break;
                }
            }
            total
        }
        "format" => {
            if let Some(width) = widest_printf_field(first) {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("{what}: a field {width} characters wide (at most {MAX_PRINTF_WIDTH})"),
                ));
            }
            let specs = first.matches('%').count() as u64;
            let mut total = first.len() as u64 + specs * MAX_PRINTF_WIDTH as u64;
            for i in 1..args.len() {
                total = total.saturating_add(len(i)?);
            }
            total
        }
        _ => 0,
    })
}

/// The keyword argument `key` of a call, if given.
fn kwarg(args: &[Value], key: &str) -> Option<Value> {
    let kwargs = args.last().filter(|v| v.is_kwargs())?;
    kwargs
        .get_item(&Value::from(key))
        .ok()
        .filter(|v| !v.is_undefined())
}

/// The width or precision past [`MAX_PRINTF_WIDTH`] that a `%` specifier
/// of `s` asks for, if any.
fn widest_printf_field(s: &str) -> Option<usize> {
    s.split('%').skip(1).find_map(|spec| {
        // `%(name)s` names its argument first.
        let spec = match spec.strip_prefix('(') {
            Some(rest) => rest.split_once(')').map_or("", |(_, r)| r),
            None => spec,
        };
        let end = spec
            .find(|c: char| !(c.is_ascii_digit() || "-+ #.".contains(c)))
            .unwrap_or(spec.len());
        spec[..end]
            .split(|c: char| !c.is_ascii_digit())
            .filter(|digits| !digits.is_empty())
            .map(|digits| digits.parse::<usize>().unwrap_or(usize::MAX))
            .find(|&n| n > MAX_PRINTF_WIDTH)
    })
}
