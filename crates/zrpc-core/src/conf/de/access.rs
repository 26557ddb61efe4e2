//! serde's access traits over [`Value`] sequences, maps, structs and enums; each child value gets
//! its key path.

use serde::de::value::StrDeserializer;
use serde::de::{self, DeserializeSeed, Error as _, IntoDeserializer, Visitor};

use super::{DeError, ValueDe, child};
use crate::conf::value::Value;

pub(super) struct SeqDe<'a> {
    pub(super) items: std::iter::Enumerate<std::slice::Iter<'a, Value>>,
    pub(super) path: &'a str,
}

impl<'de> de::SeqAccess<'de> for SeqDe<'_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        match self.items.next() {
            Some((i, value)) => {
                let path = format!("{}[{i}]", self.path);
                seed.deserialize(ValueDe {
                    value,
                    path: &path,
                    lenient: None,
                })
                .map(Some)
                .map_err(|e| e.at(&path))
            }
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// Map entries: a plain map's keys as written (`HashMap`, `BTreeMap`, `flatten`), or a
/// struct's keys already resolved to its field names.
pub(super) struct EntriesDe<'a> {
    pub(super) entries: std::vec::IntoIter<(&'a str, &'a Value)>,
    pub(super) pending: Option<(&'a str, &'a Value)>,
    pub(super) path: &'a str,
}

impl<'a> EntriesDe<'a> {
    pub(super) fn new(entries: Vec<(&'a str, &'a Value)>, path: &'a str) -> Self {
        Self {
            entries: entries.into_iter(),
            pending: None,
            path,
        }
    }
}

impl<'de> de::MapAccess<'de> for EntriesDe<'_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        match self.entries.next() {
            Some((field, value)) => {
                self.pending = Some((field, value));
                let key: StrDeserializer<'_, DeError> = field.into_deserializer();
                seed.deserialize(key)
                    .map(Some)
                    .map_err(|e| e.at(&child(self.path, field)))
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let Some((field, value)) = self.pending.take() else {
            return Err(DeError::custom("value requested before key"));
        };
        let path = child(self.path, field);
        seed.deserialize(ValueDe {
            value,
            path: &path,
            lenient: None,
        })
        .map_err(|e| e.at(&path))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An enum written as a one-key map `{Variant: value}`.
pub(super) struct EnumDe<'a> {
    pub(super) variant: &'static str,
    pub(super) value: &'a Value,
    pub(super) path: &'a str,
}

impl<'de, 'a> de::EnumAccess<'de> for EnumDe<'a> {
    type Error = DeError;
    type Variant = VariantDe<'a>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, VariantDe<'a>), DeError> {
        let key: StrDeserializer<'_, DeError> = self.variant.into_deserializer();
        let v = seed.deserialize(key)?;
        Ok((
            v,
            VariantDe {
                value: self.value,
                path: self.path,
            },
        ))
    }
}

pub(super) struct VariantDe<'a> {
    value: &'a Value,
    path: &'a str,
}

impl<'de> de::VariantAccess<'de> for VariantDe<'_> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        match self.value {
            Value::Null => Ok(()),
            other => Err(DeError::custom(format!(
                "invalid type: {}, expected no value",
                other.describe()
            ))),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        seed.deserialize(ValueDe {
            value: self.value,
            path: self.path,
            lenient: None,
        })
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_seq(
            ValueDe {
                value: self.value,
                path: self.path,
                lenient: None,
            },
            visitor,
        )
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_struct(
            ValueDe {
                value: self.value,
                path: self.path,
                lenient: None,
            },
            "",
            fields,
            visitor,
        )
    }
}
