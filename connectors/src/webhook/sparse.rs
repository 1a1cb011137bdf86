//! A delivery's JSON, built only where a parser reads it.
//!
//! A platform's payload carries hundreds of fields (a GitHub `repository`
//! event is 7.6 KB: the repository, its owner, the sender, the
//! organization, each with dozens of URLs), and a parser reads a handful.
//! Building all of it as a [`Value`] took a fifth of the CPU of the
//! deliveries bench's process (gateway and load generator together).
//! [`parse`] checks every byte as a full parse does (a body that is not
//! JSON, or not UTF-8, is refused) but builds only the members on the
//! paths a parser names, and skips the rest without allocating.
//!
//! Paths are JSON pointers (`/repository/owner/login`) in which `*` stands
//! for every element of an array (`/repositories_added/*/id`). A path that
//! ends at a member keeps that member whole. For every listed path `p`,
//! `parse(body, paths).pointer(p)` equals the full value's `pointer(p)`.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// `body` as JSON, with only the members on `paths` built.
pub(crate) fn parse(body: &[u8], paths: &[&str]) -> serde_json::Result<Value> {
    let wanted: Vec<&str> = paths
        .iter()
        .map(|p| p.strip_prefix('/').unwrap_or(p))
        .collect();
    // Skipped strings are not checked as built ones are, so the whole body
    // is checked as UTF-8 first (JSON text is UTF-8), in one pass.
    let text = std::str::from_utf8(body)
        .map_err(|e| <serde_json::Error as de::Error>::custom(format_args!("not UTF-8: {e}")))?;
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Wanted(wanted).deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Whether a read of `pointer` finds what the full value would have: a
/// listed path is it, holds it (kept whole), or goes through it (the reader
/// then reads on along a listed path).
pub(crate) fn covers(paths: &[&str], pointer: &str) -> bool {
    paths.iter().any(|path| {
        // Compared over the shorter of the two.
        path.split('/')
            .skip(1)
            .zip(pointer.split('/').skip(1))
            .all(|(kept, read)| kept == read || (kept == "*" && read.parse::<usize>().is_ok()))
    })
}

/// The rest of each path still wanted below the current value; an empty
/// rest keeps the value whole.
struct Wanted<'p>(Vec<&'p str>);

impl<'p> Wanted<'p> {
    /// The rests of the paths that go on through `segment`. Each path is
    /// compared where it starts, not split at its first `/`: this runs for
    /// every member of every object a path goes through (a repository has
    /// about a hundred), and searching each path for its `/` there was a
    /// tenth of the parse.
    fn below(&self, segment: &str) -> Wanted<'p> {
        if segment.contains('/') {
            // No path segment holds one.
            return Wanted(Vec::new());
        }
        Wanted(
            self.0
                .iter()
                .filter_map(|path| {
                    let rest = path.strip_prefix(segment)?;
                    match rest.as_bytes().first() {
                        None => Some(""),
                        Some(b'/') => Some(&rest[1..]),
                        Some(_) => None,
                    }
                })
                .collect(),
        )
    }
}

impl<'de> DeserializeSeed<'de> for Wanted<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        if self.0.iter().any(|rest| rest.is_empty()) {
            return serde::Deserialize::deserialize(d);
        }
        d.deserialize_any(self)
    }
}

/// A member name, borrowed from the body when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de> Visitor<'de> for Wanted<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut kept = Map::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let below = self.below(&key);
            if below.0.is_empty() {
                map.next_value::<IgnoredAny>()?;
            } else {
                // A repeated member replaces the earlier one, as in a Value.
                kept.insert(key.into_owned(), map.next_value_seed(below)?);
            }
        }
        Ok(Value::Object(kept))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut kept = Vec::new();
        loop {
            let below = self.below("*");
            if below.0.is_empty() {
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    break;
                }
            } else {
                match seq.next_element_seed(below)? {
                    Some(v) => kept.push(v),
                    None => break,
                }
            }
        }
        Ok(Value::Array(kept))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PATHS: &[&str] = &[
        "/action",
        "/repository/owner/login",
        "/repository/id",
        "/added/*/id",
        "/changes",
    ];

    fn body() -> Value {
        json!({
            "action": "renamed",
            "repository": {
                "id": 42, "name": "x", "owner": {"login": "acme", "id": 7, "url": "u"},
                "topics": ["a", "b"], "size": 1.5, "private": false, "homepage": null
            },
            "added": [{"id": 1, "name": "a"}, {"id": "2"}, {"name": "no id"}],
            "changes": {"repository": {"name": {"from": "old"}}, "owner": [1, {"a": null}]},
            "sender": {"login": "someone", "site_admin": false},
            "escaped \"key\"": "v\u{e9}",
            // Members whose names begin or end like a path's segment.
            "act": 1, "actions": 2, "repository_id": 3, "repo": {"id": 4},
            "repository/owner": {"login": "a slash in a name"},
        })
    }

    #[test]
    fn listed_paths_read_as_in_the_full_value() {
        let full = body();
        let bytes = serde_json::to_vec(&full).unwrap();
        let sparse = parse(&bytes, PATHS).unwrap();
        for p in [
            "/action",
            "/repository/id",
            "/repository/owner/login",
            "/added/0/id",
            "/added/1/id",
            "/changes",
            "/changes/repository/name/from",
            "/changes/owner/1",
        ] {
            assert_eq!(sparse.pointer(p), full.pointer(p), "{p}");
            assert!(sparse.pointer(p).is_some(), "{p}");
        }
        // What no path names is not built.
        for p in [
            "/sender",
            "/repository/name",
            "/repository/owner/id",
            "/added/0/name",
            "/act",
            "/actions",
            "/repository_id",
            "/repo",
            "/repository~1owner",
        ] {
            assert!(full.pointer(p).is_some(), "{p}");
            assert_eq!(sparse.pointer(p), None, "{p}");
        }
        // An element without the wanted member is kept (empty), so that
        // positions and counts stay those of the full array.
        assert_eq!(sparse.pointer("/added/2"), Some(&json!({})));
    }

    #[test]
    fn anything_that_is_not_json_is_refused_as_in_a_full_parse() {
        for bad in [
            &b"{\"action\": \"x\""[..],
            b"{\"action\": \"x\"} trailing",
            b"{\"sender\": {\"login\": tru}}",
            b"{\"sender\": \"\xff\"}",
            b"",
            b"[1, 2,]",
        ] {
            assert!(serde_json::from_slice::<Value>(bad).is_err());
            assert!(
                parse(bad, PATHS).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_path_through_a_value_of_another_shape_finds_nothing() {
        let bytes = br#"{"repository": "not an object", "added": {"id": 3}, "action": [1]}"#;
        let sparse = parse(bytes, PATHS).unwrap();
        assert_eq!(sparse.pointer("/repository"), Some(&json!("not an object")));
        assert_eq!(sparse.pointer("/repository/id"), None);
        assert_eq!(sparse.pointer("/added"), Some(&json!({})));
        assert_eq!(sparse.pointer("/action"), Some(&json!([1])));
    }

    #[test]
    fn coverage_follows_segments() {
        assert!(covers(PATHS, "/action"));
        assert!(covers(PATHS, "/repository"));
        assert!(covers(PATHS, "/repository/owner/login"));
        assert!(covers(PATHS, "/added/3/id"));
        assert!(covers(PATHS, "/changes/owner/from/user/login"));
        assert!(!covers(PATHS, "/repository/name"));
        assert!(!covers(PATHS, "/repository/owner/id"));
        assert!(!covers(PATHS, "/added/x/id"));
        assert!(!covers(PATHS, "/sender/login"));
    }
}
