//! Bounds on what a chat template may build and print. The engine's fuel
//! counts instructions, not the size of what one instruction prints: a
//! list that holds itself twice, nested forty times, is forty instructions
//! and 2^40 elements to print, and a list nested a hundred thousand deep,
//! built by a loop, overflows the stack of whatever walks it. So each value
//! that leaves the template (`{{ }}`, `tojson`, `pprint`, `string`) is
//! measured first, without recursion, and refused past these bounds.

use minijinja::value::ValueKind;
use minijinja::{Error, ErrorKind, Value};

/// The largest chat template source, in bytes (real ones are a few KB).
pub const MAX_TEMPLATE_BYTES: usize = 1 << 20;

/// The most filters one expression of a template may chain
/// (`x | f | g | ...`): the engine compiles a chain by recursion.
pub const MAX_FILTER_CHAIN: usize = 256;

/// The deepest nesting of lists and maps a template may print.
pub const MAX_VALUE_DEPTH: usize = 256;

/// The most elements (counted with repeats, nested ones included) a value
/// a template prints may hold.
pub const MAX_VALUE_ELEMENTS: u64 = 1 << 20;

fn refused(message: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, message)
}

/// Refuses a template source past [`MAX_TEMPLATE_BYTES`] or with a filter
/// chain past [`MAX_FILTER_CHAIN`].
pub(super) fn check_source(source: &str) -> Result<(), String> {
    if source.len() > MAX_TEMPLATE_BYTES {
        return Err(format!(
            "the template is {} bytes, more than {MAX_TEMPLATE_BYTES}",
            source.len()
        ));
    }
    let mut line = 1;
    let mut chain = 0;
    let mut inside = false;
    let bytes = source.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'\n' => line += 1,
            b'{' if matches!(bytes.get(i + 1), Some(b'{' | b'%')) => {
                inside = true;
                chain = 0;
            }
            b'}' if i > 0 && matches!(bytes[i - 1], b'}' | b'%') => inside = false,
            b'|' if inside => {
                chain += 1;
                if chain > MAX_FILTER_CHAIN {
                    return Err(format!(
                        "template line {line}: more than {MAX_FILTER_CHAIN} filters in one expression"
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Refuses `value` when it nests deeper than [`MAX_VALUE_DEPTH`] or holds
/// more than [`MAX_VALUE_ELEMENTS`]; `what` names the use in the error.
pub(super) fn check_value(value: &Value, what: &str) -> Result<(), Error> {
    // Plain values, the common case, cost one match.
    if !matches!(
        value.kind(),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable
    ) {
        return Ok(());
    }
    let mut todo = vec![(value.clone(), 0usize)];
    let mut elements: u64 = 0;
    while let Some((v, depth)) = todo.pop() {
        elements += 1;
        if elements > MAX_VALUE_ELEMENTS {
            return Err(refused(format!(
                "{what}: a value of more than {MAX_VALUE_ELEMENTS} elements"
            )));
        }
        if depth > MAX_VALUE_DEPTH {
            return Err(refused(format!(
                "{what}: a value nested more than {MAX_VALUE_DEPTH} deep"
            )));
        }
        match v.kind() {
            ValueKind::Seq | ValueKind::Iterable => {
                for item in v.try_iter()? {
                    todo.push((item, depth + 1));
                    if todo.len() as u64 > MAX_VALUE_ELEMENTS {
                        break;
                    }
                }
            }
            ValueKind::Map => {
                for key in v.try_iter()? {
                    let item = v.get_item(&key)?;
                    todo.push((key, depth + 1));
                    todo.push((item, depth + 1));
                    if todo.len() as u64 > MAX_VALUE_ELEMENTS {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}
