//! Test strategies for the wire types: [`Arb`] is implemented for every
//! field type here and for every wire type by its declaration
//! ([`wire_struct!`](crate::wire_struct) and friends), so the round-trip
//! property covers each type as it is declared.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;

use super::{write_str, RawJson};

/// A strategy for values of a wire type (unit tests only).
pub(crate) trait Arb: Sized + std::fmt::Debug {
    /// Any value of the type, kept small (lists of at most 3).
    fn arb() -> BoxedStrategy<Self>;
}

/// Any text: controls, quotes, backslashes, non-ASCII and astral characters.
pub(crate) fn text() -> BoxedStrategy<String> {
    prop_oneof![
        "(?s).{0,12}",
        "[a-z0-9_\\.]{0,8}",
        "[\\x00-\\x1f\"\\\\/é日😀\u{2028}]{0,6}",
    ]
    .boxed()
}

impl Arb for String {
    fn arb() -> BoxedStrategy<Self> {
        text()
    }
}

impl Arb for u64 {
    fn arb() -> BoxedStrategy<Self> {
        prop_oneof![0..10u64, any::<u64>()].boxed()
    }
}

impl Arb for i64 {
    fn arb() -> BoxedStrategy<Self> {
        prop_oneof![-10..10i64, any::<i64>()].boxed()
    }
}

impl Arb for bool {
    fn arb() -> BoxedStrategy<Self> {
        any::<bool>().boxed()
    }
}

impl<T: Arb + 'static> Arb for Option<T> {
    fn arb() -> BoxedStrategy<Self> {
        proptest::option::of(T::arb()).boxed()
    }
}

impl<T: Arb + 'static> Arb for Vec<T> {
    fn arb() -> BoxedStrategy<Self> {
        vec(T::arb(), 0..3).boxed()
    }
}

impl Arb for RawJson {
    fn arb() -> BoxedStrategy<Self> {
        json_text()
            .prop_map(|t| RawJson::parse(&t).expect("generated JSON is valid"))
            .boxed()
    }
}

/// Compact JSON texts of every kind of value, nested a few levels.
pub(crate) fn json_text() -> BoxedStrategy<String> {
    let quoted = || {
        text().prop_map(|s| {
            let mut out = String::new();
            write_str(&mut out, &s);
            out
        })
    };
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        Just("-0.5e-3".to_owned()),
        Just("1E400".to_owned()),
        quoted(),
    ];
    leaf.prop_recursive(3, 16, 3, move |inner| {
        prop_oneof![
            vec(inner.clone(), 0..3).prop_map(|v| format!("[{}]", v.join(","))),
            vec((quoted(), inner), 0..3).prop_map(|v| {
                let members: Vec<String> = v.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
    .boxed()
}

/// Compact JSON objects (what an event's `data` is).
pub(crate) fn json_object() -> BoxedStrategy<RawJson> {
    vec(
        (
            text().prop_map(|s| {
                let mut out = String::new();
                write_str(&mut out, &s);
                out
            }),
            json_text(),
        ),
        0..3,
    )
    .prop_map(|v| {
        let members: Vec<String> = v.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
        RawJson::parse(&format!("{{{}}}", members.join(","))).expect("generated JSON is valid")
    })
    .boxed()
}
