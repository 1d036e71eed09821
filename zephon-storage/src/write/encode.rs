//! JSON lines of records (token files are encoded by
//! [`TokenDtype::encode`](crate::format::TokenDtype::encode) and
//! [`encode_megatron`](crate::format::tokens::encode_megatron)).

use zephon_core::{Record, Value};

/// One JSON line for `record`: its fields (all, or `fields` in that order)
/// as a JSON object. Token ids become arrays of numbers; raw bytes have
/// no JSON form and are an error naming the field, as is a field asked
/// for that the record lacks.
pub(crate) fn json_line(
    record: &Record,
    fields: Option<&[String]>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let value = |name: &str, v: &Value| -> Result<serde_json::Value, String> {
        use serde_json::Value as J;
        Ok(match v {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(J::Number)
                .ok_or_else(|| format!("field `{name}` holds {f}, which JSON cannot hold"))?,
            Value::Text(_) | Value::TextView(_) => J::String(v.as_text().unwrap_or("").to_owned()),
            Value::Tokens(_) | Value::TokenView(_) => J::from(
                v.token_ids()
                    .map(|t| t.iter().collect::<Vec<u32>>())
                    .unwrap_or_default(),
            ),
            Value::Bytes(_) => {
                return Err(format!(
                    "field `{name}` holds raw bytes, which JSON lines cannot hold; \
                     leave it out with the field list, or write WebDataset or MDS"
                ));
            }
            Value::Json(j) => j.clone(),
        })
    };
    let mut obj = serde_json::Map::new();
    match fields {
        Some(names) => {
            for name in names {
                let v = record
                    .get(name)
                    .ok_or_else(|| format!("the record has no field `{name}`"))?;
                obj.insert(name.clone(), value(name, v)?);
            }
        }
        None => {
            for (name, v) in record.fields.iter() {
                obj.insert(name.as_str().to_owned(), value(name.as_str(), v)?);
            }
        }
    }
    serde_json::to_writer(&mut *out, &serde_json::Value::Object(obj)).map_err(|e| e.to_string())?;
    out.push(b'\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_missing_fields_are_refused_by_name() {
        let r = Record::new().with("text", "hi").with("n", 3i64);
        let mut out = Vec::new();
        json_line(&r, None, &mut out).unwrap();
        let back: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, serde_json::json!({"text": "hi", "n": 3}));
        let e = json_line(&r, Some(&["gone".into()]), &mut out).unwrap_err();
        assert!(e.contains("`gone`"), "{e}");
        let b = Record::new().with("jpg", Value::Bytes(bytes::Bytes::from_static(b"x")));
        assert!(json_line(&b, None, &mut out).unwrap_err().contains("`jpg`"));
    }
}
