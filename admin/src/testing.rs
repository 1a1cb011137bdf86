//! The OpenAPI document as a contract the tests hold the server to (behind
//! the `testing` feature). [`Contract::layer`] wraps a router so that every
//! `/v1` answer a test receives is checked against the document: the route
//! and method are in it, the status is one it lists, and the body fits the
//! schema it gives for that status: the right types, every required field,
//! and no field the document does not name. A small walker of the shapes
//! utoipa writes (`$ref`, `oneOf` with null, arrays, objects, maps, 3.1
//! type lists), not a full JSON Schema validator.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;

/// `(METHOD, path template, status)`: one kind of answer seen.
pub type Seen = (String, String, u16);

/// The document and what the answers checked against it broke.
pub struct Contract {
    doc: Value,
    broken: Mutex<Vec<String>>,
    seen: Mutex<BTreeSet<Seen>>,
}

impl Contract {
    pub fn new(doc: Value) -> Arc<Contract> {
        Arc::new(Contract {
            doc,
            broken: Mutex::default(),
            seen: Mutex::default(),
        })
    }

    /// The document this crate serves at `/v1/openapi.json`.
    pub fn of_this_api() -> Arc<Contract> {
        Contract::new(serde_json::to_value(crate::api::openapi()).expect("the document is JSON"))
    }

    pub fn doc(&self) -> &Value {
        &self.doc
    }

    /// Every `(METHOD, template)` the document lists, with its statuses.
    pub fn operations(&self) -> BTreeMap<(String, String), BTreeSet<u16>> {
        let mut out = BTreeMap::new();
        for (path, item) in self.doc["paths"].as_object().into_iter().flatten() {
            for (method, op) in item.as_object().into_iter().flatten() {
                let Some(responses) = op["responses"].as_object() else {
                    continue;
                };
                let statuses = responses.keys().filter_map(|s| s.parse().ok()).collect();
                out.insert((method.to_uppercase(), path.clone()), statuses);
            }
        }
        out
    }

    /// The template of the document's route `path` (no query) falls
    /// under, preferring the one with the most literal segments.
    pub fn template(&self, path: &str) -> Option<String> {
        let want: Vec<&str> = path.split('/').collect();
        let mut best: Option<(usize, &String)> = None;
        for template in self.doc["paths"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(t, _)| t)
        {
            let have: Vec<&str> = template.split('/').collect();
            if have.len() != want.len() {
                continue;
            }
            let mut literal = 0;
            let fits = have.iter().zip(&want).all(|(h, w)| {
                if h.starts_with('{') && h.ends_with('}') {
                    !w.is_empty()
                } else {
                    literal += 1;
                    h == w
                }
            });
            if fits && best.is_none_or(|(n, _)| literal > n) {
                best = Some((literal, template));
            }
        }
        best.map(|(_, t)| t.clone())
    }

    /// Check one answer; its violations are returned and kept.
    pub fn check(&self, method: &Method, path: &str, status: u16, body: &[u8]) -> Vec<String> {
        let path = path.split('?').next().unwrap_or_default();
        if !path.starts_with("/v1/") || path == "/v1/openapi.json" {
            return Vec::new();
        }
        let found = self.check_route(method, path, status, body);
        self.broken.lock().unwrap().extend(found.iter().cloned());
        found
    }

    fn check_route(&self, method: &Method, path: &str, status: u16, body: &[u8]) -> Vec<String> {
        let at = format!("{method} {path} answered {status}");
        let Some(template) = self.template(path) else {
            return vec![format!("{at}: no route of the document is {path}")];
        };
        let op = &self.doc["paths"][&template][method.as_str().to_lowercase()];
        if !op.is_object() {
            return vec![format!("{at}: the document has no {method} {template}")];
        }
        let response = &op["responses"][status.to_string()];
        if !response.is_object() {
            let listed: Vec<&String> = op["responses"].as_object().unwrap().keys().collect();
            return vec![format!(
                "{at}: {method} {template} documents only {listed:?}"
            )];
        }
        self.seen
            .lock()
            .unwrap()
            .insert((method.to_string(), template.clone(), status));
        let schema = &response["content"]["application/json"]["schema"];
        if !schema.is_object() {
            return match body.is_empty() {
                true => Vec::new(),
                false => vec![format!("{at}: a body where the document gives none")],
            };
        }
        match serde_json::from_slice::<Value>(body) {
            Ok(value) => violations(&self.doc, schema, &value, &format!("{at}: $")),
            Err(e) => vec![format!("{at}: the body is not JSON ({e})")],
        }
    }

    /// Everything the answers checked so far broke.
    pub fn broken(&self) -> Vec<String> {
        self.broken.lock().unwrap().clone()
    }

    /// Every kind of documented answer checked so far.
    pub fn seen(&self) -> BTreeSet<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// `router` with every answer checked on its way out.
    pub fn layer(self: &Arc<Self>, router: Router) -> Router {
        let contract = self.clone();
        router.layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let contract = contract.clone();
                async move { contract.checked(req, next).await }
            },
        ))
    }

    async fn checked(&self, req: Request, next: Next) -> Response {
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let (parts, body) = next.run(req).await.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        self.check(&method, &path, parts.status.as_u16(), &bytes);
        Response::from_parts(parts, Body::from(bytes))
    }
}

/// The schema `doc` gives for `status` of `method path` (a template).
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
        if !target.is_object() {
            return vec![format!("{at}: the document's {r} is dangling")];
        }
        return violations(doc, target, value, at);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            let ok = options
                .iter()
                .any(|o| violations(doc, o, value, at).is_empty());
            return match ok {
                true => Vec::new(),
                false => vec![format!("{at}: {value} matches none of {key}")],
            };
        }
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        return all
            .iter()
            .flat_map(|s| violations(doc, s, value, at))
            .collect();
    }
    if let Some(types) = schema.get("type")
        && !fits_type(types, value)
    {
        return vec![format!("{at}: {value} is not {types}")];
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        return vec![format!("{at}: {value} is not one of {allowed:?}")];
    }
    let mut out = Vec::new();
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
        for (i, v) in list.iter().enumerate() {
            out.extend(violations(doc, items, v, &format!("{at}[{i}]")));
        }
    }
    let Some(obj) = value.as_object() else {
        return out;
    };
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
    let props = schema.get("properties").and_then(Value::as_object);
    let extra = schema.get("additionalProperties").filter(|s| s.is_object());
    for (k, v) in obj {
        let at = format!("{at}.{k}");
        match (props.and_then(|p| p.get(k)), extra) {
            (Some(s), _) | (None, Some(s)) => out.extend(violations(doc, s, v, &at)),
            // An object the document leaves open (free-form settings or
            // evidence) takes any field; one with properties takes only those.
            (None, None) if props.is_none() => {}
            (None, None) => out.push(format!("{at}: the document has no such field")),
        }
    }
    out
}

fn fits_type(types: &Value, value: &Value) -> bool {
    let types: Vec<&str> = match types {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return true,
    };
    types.iter().any(|t| match *t {
        "null" => value.is_null(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    })
}
