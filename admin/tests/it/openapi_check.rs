//! A small checker of JSON answers against the schemas of the OpenAPI
//! document the server serves: types, required fields, and no field the
//! document does not list. Enough for the shapes utoipa writes (`$ref`,
//! `oneOf` with null, arrays, objects, 3.1 type lists).

use serde_json::Value;

/// The schema the document gives for `status` of `method path`.
pub fn response_schema<'d>(doc: &'d Value, method: &str, path: &str, status: u16) -> &'d Value {
    let op = &doc["paths"][path][method];
    assert!(op.is_object(), "{method} {path} is not in the document");
    let schema = &op["responses"][status.to_string()]["content"]["application/json"]["schema"];
    assert!(
        schema.is_object(),
        "{method} {path} documents no JSON body for {status}"
    );
    schema
}

/// Every way `value` breaks `schema` (empty: it conforms).
pub fn violations(doc: &Value, schema: &Value, value: &Value, at: &str) -> Vec<String> {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/components/schemas/");
        let target = &doc["components"]["schemas"][name];
        assert!(target.is_object(), "dangling {r}");
        return violations(doc, target, value, at);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            let ok = options
                .iter()
                .any(|o| violations(doc, o, value, at).is_empty());
            return if ok {
                Vec::new()
            } else {
                vec![format!("{at}: {value} matches none of {key}")]
            };
        }
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        return all
            .iter()
            .flat_map(|s| violations(doc, s, value, at))
            .collect();
    }
    let mut out = Vec::new();
    if let Some(types) = schema.get("type") {
        let types: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let fits = types.iter().any(|t| match *t {
            "null" => value.is_null(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => false,
        });
        if !fits {
            out.push(format!("{at}: {value} is not {types:?}"));
            return out;
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
        for (i, v) in list.iter().enumerate() {
            out.extend(violations(doc, items, v, &format!("{at}[{i}]")));
        }
    }
    if let (Some(props), Some(obj)) = (
        schema.get("properties").and_then(Value::as_object),
        value.as_object(),
    ) {
        for req in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !obj.contains_key(req) {
                out.push(format!("{at}: required {req:?} is missing"));
            }
        }
        for (k, v) in obj {
            match props.get(k) {
                Some(s) => out.extend(violations(doc, s, v, &format!("{at}.{k}"))),
                None => out.push(format!("{at}: {k:?} is not in the document")),
            }
        }
    }
    out
}
