//! Closed sets of names: the enums whose values are stored and sent as
//! fixed strings (a platform, a proposal's state, a key's role…).
//!
//! [`crate::string_enum!`] declares one: each variant is paired with its
//! text, and the enum gets `ALL`, `as_str`, `parse`, `Display`, `FromStr` (whose
//! error lists the known values), `TryFrom<String>` (for `sqlx(try_from)`),
//! comparison with a `&str`, and serde as that same text. A stored value or a JSON answer is
//! therefore byte-identical to the string it replaced.

use std::fmt;

/// A text that is none of a closed set's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// What was being named: `platform`, `proposal state`, …
    pub what: &'static str,
    pub given: String,
    pub known: &'static [&'static str],
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} {:?}; known: {}",
            self.what,
            self.given,
            self.known.join(", ")
        )
    }
}

impl std::error::Error for UnknownName {}

/// The variant of `all` whose text is `given`: exactly, else ignoring ASCII
/// case and surrounding spaces (what people type).
#[doc(hidden)]
pub fn find<T: Copy>(
    what: &'static str,
    given: &str,
    all: &[T],
    known: &'static [&'static str],
) -> Result<T, UnknownName> {
    let exact = known.iter().position(|k| *k == given);
    let loose = || {
        known
            .iter()
            .position(|k| k.eq_ignore_ascii_case(given.trim()))
    };
    exact
        .or_else(loose)
        .map(|i| all[i])
        .ok_or_else(|| UnknownName {
            what,
            given: given.to_owned(),
            known,
        })
}

/// Declares an enum of names; see the [module docs](crate::names).
///
/// ```
/// cmcp_domain::string_enum! {
///     /// How a thing is shared.
///     pub enum Sharing: "sharing" {
///         Open = "open",
///         ByInvite = "by-invite",
///     }
/// }
/// assert_eq!(Sharing::ByInvite.as_str(), "by-invite");
/// assert_eq!("open".parse::<Sharing>(), Ok(Sharing::Open));
/// ```
#[macro_export]
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: [$name; <[&str]>::len(&[$($text),+])] = [$($name::$variant),+];
            /// The texts of [`Self::ALL`], in the same order.
            pub const NAMES: [&'static str; <[&str]>::len(&[$($text),+])] = [$($text),+];

            /// The value's stored and printed text.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text ),+
                }
            }

            /// [`FromStr`](::std::str::FromStr) without the reason.
            pub fn parse(s: &str) -> Option<Self> {
                s.parse().ok()
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::names::UnknownName;

            fn from_str(s: &str) -> ::std::result::Result<Self, Self::Err> {
                $crate::names::find($what, s, &$name::ALL, &$name::NAMES)
            }
        }

        impl ::std::cmp::PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl ::std::cmp::PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl ::std::convert::TryFrom<String> for $name {
            type Error = $crate::names::UnknownName;

            fn try_from(s: String) -> ::std::result::Result<Self, Self::Error> {
                s.parse()
            }
        }

        impl $crate::names::__serde::Serialize for $name {
            fn serialize<S>(&self, s: S) -> ::std::result::Result<S::Ok, S::Error>
            where
                S: $crate::names::__serde::Serializer,
            {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> $crate::names::__serde::Deserialize<'de> for $name {
            fn deserialize<D>(d: D) -> ::std::result::Result<Self, D::Error>
            where
                D: $crate::names::__serde::Deserializer<'de>,
            {
                let s = <String as $crate::names::__serde::Deserialize>::deserialize(d)?;
                s.parse()
                    .map_err(<D::Error as $crate::names::__serde::de::Error>::custom)
            }
        }
    };
}

#[doc(hidden)]
pub use serde as __serde;

#[cfg(test)]
mod tests {
    string_enum! {
        /// A test set with a two-word name.
        enum Colour: "colour" {
            Red = "red",
            /// Documented variant.
            DeepBlue = "deep-blue",
        }
    }

    #[test]
    fn every_value_round_trips_through_text_and_json() {
        for c in Colour::ALL {
            assert_eq!(c.as_str().parse::<Colour>(), Ok(c));
            assert_eq!(c.to_string(), c.as_str());
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(serde_json::from_str::<Colour>(&json).unwrap(), c);
            assert_eq!(Colour::try_from(c.as_str().to_owned()), Ok(c));
        }
        assert_eq!(Colour::NAMES, ["red", "deep-blue"]);
        assert!(Colour::DeepBlue == "deep-blue" && Colour::Red != "deep-blue");
    }

    #[test]
    fn parsing_forgives_case_and_spaces() {
        assert_eq!(" Deep-Blue ".parse::<Colour>(), Ok(Colour::DeepBlue));
        assert_eq!(Colour::parse("RED"), Some(Colour::Red));
        assert_eq!(Colour::parse("green"), None);
    }

    #[test]
    fn unknown_text_lists_the_known_values() {
        let e = "green".parse::<Colour>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown colour \"green\"; known: red, deep-blue"
        );
        let json = serde_json::from_str::<Colour>("\"green\"").unwrap_err();
        assert!(json.to_string().contains("known: red, deep-blue"), "{json}");
    }
}
