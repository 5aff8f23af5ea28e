//! One declaration per wire type. Each macro emits the type with its serde
//! derives (the server reads and writes with serde_json; the client writes
//! through [`to_string`](super::to_string)) *and* the [`FromJson`](super::FromJson)
//! reader the client uses (the wasm links no serde_json), so the two readers
//! cannot disagree on a key, a default or a variant name.
//!
//! A field is required unless it ends in `= default` (missing takes
//! `Default::default()`). An `Option` field must end in `= default` (serde
//! reads a missing `Option` as `None` either way; the macro refuses one
//! without, at compile time). The only serde attribute a field may carry is
//! `#[serde(skip_serializing_if = "...")]`, which changes what is written,
//! never what is read. Keys are the field names.
//!
//! In unit tests each type also gets an [`Arb`](super::arb::Arb) strategy,
//! for the round-trip property of every wire type.

/// A struct of the wire: `wire_struct! { /// doc  #[derive(..)] pub struct
/// Name { /// doc  field: Type, other: Type = default } }`.
#[macro_export]
#[doc(hidden)]
macro_rules! wire_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                $(#[serde(skip_serializing_if = $skip:literal)])?
                $field:ident : $ty:ty $(= $default:ident)?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(serde::Serialize, serde::Deserialize)]
        pub struct $name {
            $(
                $(#[doc = $doc])*
                $(#[serde(skip_serializing_if = $skip)])?
                $(#[serde($default)])?
                pub $field: $ty,
            )*
        }

        impl $crate::json::FromJson for $name {
            fn read(
                r: &mut $crate::json::Reader<'_>,
            ) -> Result<Self, $crate::json::JsonError> {
                $( let mut $field: Option<$ty> = None; )*
                let slots: &mut [&mut dyn $crate::json::Slot] = &mut [$( &mut $field ),*];
                r.fields(
                    &[$( stringify!($field) ),*],
                    &[$( $crate::wire_struct!(@required $($default)?) ),*],
                    slots,
                )?;
                Ok($name { $( $field: $crate::wire_struct!(@take $field $ty $(, $default)?), )* })
            }

            fn read_into(
                &mut self,
                r: &mut $crate::json::Reader<'_>,
            ) -> Result<(), $crate::json::JsonError> {
                let $name { $( $field ),* } = self;
                $( let mut $field = $crate::json::InPlace($field, false); )*
                r.fields(
                    &[$( stringify!($field) ),*],
                    &[$( $crate::wire_struct!(@required $($default)?) ),*],
                    &mut [$( &mut $field ),*],
                )?;
                $( $crate::wire_struct!(@absent $field $(, $default)?); )*
                Ok(())
            }
        }

        #[cfg(all(test, not(target_arch = "wasm32")))]
        impl $crate::json::arb::Arb for $name {
            fn arb() -> proptest::strategy::BoxedStrategy<Self> {
                use proptest::strategy::Strategy;
                (
                    proptest::strategy::Just(()),
                    $( <$ty as $crate::json::arb::Arb>::arb(), )*
                )
                    .prop_map(|((), $( $field, )*)| $name { $( $field ),* })
                    .boxed()
            }
        }
    };
    (@take $field:ident $ty:ty) => {{
        const _: () = assert!(
            !<$ty as $crate::json::FromJson>::OPTIONAL,
            concat!("`", stringify!($field), "` is an Option: declare it `= default`, as serde reads it"),
        );
        // `fields` has checked that a required slot is filled.
        match $field {
            Some(value) => value,
            None => unreachable!(),
        }
    }};
    (@required) => { true };
    (@required default) => { false };
    (@take $field:ident $ty:ty, default) => {
        $field.unwrap_or_default()
    };
    // A field `read_into` found no key for: as `read` leaves it.
    (@absent $field:ident) => {};
    (@absent $field:ident, default) => {
        if !$field.1 {
            *$field.0 = Default::default();
        }
    };
}

/// An enum of fixed strings: `wire_enum! { /// doc  #[derive(..)] pub enum
/// Name { /// doc  Variant = "wire", } }`. Also emits `as_str`.
#[macro_export]
#[doc(hidden)]
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[doc = $doc:literal])* $variant:ident = $wire:literal ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $( $(#[doc = $doc])* #[serde(rename = $wire)] $variant, )*
        }

        impl $name {
            /// The name on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )*
                }
            }
        }

        impl $crate::json::FromJson for $name {
            fn read(
                r: &mut $crate::json::Reader<'_>,
            ) -> Result<Self, $crate::json::JsonError> {
                let at = r.pos();
                match &*r.string()? {
                    $( $wire => Ok($name::$variant), )*
                    _ => Err($crate::json::JsonError::Type(
                        at,
                        concat!("a known ", stringify!($name)),
                    )),
                }
            }
        }

        #[cfg(all(test, not(target_arch = "wasm32")))]
        impl $crate::json::arb::Arb for $name {
            fn arb() -> proptest::strategy::BoxedStrategy<Self> {
                use proptest::strategy::Strategy;
                proptest::sample::select(vec![$( $name::$variant ),*]).boxed()
            }
        }
    };
}

/// An internally tagged enum of struct variants: `wire_tagged! { /// doc
/// #[derive(..)] pub enum Name (tag = "kind") { /// doc  Variant = "wire" {
/// fields as in `wire_struct!` }, } }`.
///
/// The reader takes the tag from the first key when it is there (what both
/// writers produce) and reads the variant's fields in the same pass;
/// elsewhere it costs a second pass ([`Reader::tag`](super::Reader::tag)).
#[macro_export]
#[doc(hidden)]
macro_rules! wire_tagged {
    (
        $(#[$meta:meta])*
        pub enum $name:ident (tag = $tag:literal) {
            $(
                $(#[doc = $vdoc:literal])*
                $variant:ident = $wire:literal {
                    $(
                        $(#[doc = $doc:literal])*
                        $(#[serde(skip_serializing_if = $skip:literal)])?
                        $field:ident : $ty:ty $(= $default:ident)?
                    ),* $(,)?
                }
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(serde::Serialize, serde::Deserialize)]
        #[serde(tag = $tag)]
        pub enum $name {
            $(
                $(#[doc = $vdoc])*
                #[serde(rename = $wire)]
                $variant {
                    $(
                        $(#[doc = $doc])*
                        $(#[serde(skip_serializing_if = $skip)])?
                        $(#[serde($default)])?
                        $field: $ty,
                    )*
                },
            )*
        }

        impl $crate::json::FromJson for $name {
            fn read(
                r: &mut $crate::json::Reader<'_>,
            ) -> Result<Self, $crate::json::JsonError> {
                let at = r.pos();
                let kind = r.tag($tag)?;
                match &*kind {
                    $(
                        $wire => {
                            $( let mut $field: Option<$ty> = None; )*
                            let slots: &mut [&mut dyn $crate::json::Slot] =
                                &mut [$( &mut $field ),*];
                            r.fields(
                                &[$( stringify!($field) ),*],
                                &[$( $crate::wire_struct!(@required $($default)?) ),*],
                                slots,
                            )?;
                            Ok($name::$variant {
                                $( $field: $crate::wire_struct!(@take $field $ty $(, $default)?), )*
                            })
                        }
                    )*
                    _ => Err($crate::json::JsonError::Type(
                        at,
                        concat!("a known ", stringify!($name), " ", $tag),
                    )),
                }
            }
        }

        #[cfg(all(test, not(target_arch = "wasm32")))]
        impl $crate::json::arb::Arb for $name {
            fn arb() -> proptest::strategy::BoxedStrategy<Self> {
                use proptest::strategy::Strategy;
                proptest::strategy::Union::new(vec![
                    $(
                        (
                            proptest::strategy::Just(()),
                            $( <$ty as $crate::json::arb::Arb>::arb(), )*
                        )
                            .prop_map(|((), $( $field, )*)| $name::$variant { $( $field ),* })
                            .boxed(),
                    )*
                ])
                .boxed()
            }
        }
    };
}
