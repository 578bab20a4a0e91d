//! How a rollout keeps its copy of a config group: the same `GroupConfig`, written
//! inside the rollout's group with each field named `config_<field>` (Teleport's
//! `config_days`, `config_start_hour`, `config_wait_hours`), but for `canary_count`,
//! which keeps its name, and `name`, which is the rollout group's own. Teleport's fields
//! (`config_days`, `config_start_hour`, `config_wait_hours`, `canary_count`) are always
//! written, as Teleport writes them; the others only when set, as in the config. So a
//! field added to `GroupConfig` reaches the rollout, its copy and the comparison of
//! the two (`GroupConfig::differing_fields`) with nothing more written. Generic over
//! [`RolloutCopy`] so that this module needs nothing of its parent.
//!
//! Read leniently, as every system resource: a `config_` field this version does not
//! know (one a newer replica wrote) is skipped, not refused.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::ser::{self, Impossible, SerializeMap, SerializeStruct};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::domain::window::Day;

const PREFIX: &str = "config_";
/// The one field written under its own name.
const UNPREFIXED: &str = "canary_count";
/// The field the rollout group holds itself.
const NAME: &str = "name";

/// What a rollout keeps a copy of (a config group).
pub(super) trait RolloutCopy: Serialize + DeserializeOwned {
    /// The names of its fields, `name` among them ([`struct_fields`]).
    fn fields() -> &'static [&'static str];
    /// Makes a copy read back equal to the one written (an unset value written as its
    /// default reads back unset).
    fn read_back(&mut self);
}

/// `#[serde(flatten, with = "group_copy")]`: writes the copy's fields into the rollout
/// group.
pub(super) fn serialize<T: RolloutCopy, S: Serializer>(copy: &T, s: S) -> Result<S::Ok, S::Error> {
    copy.serialize(Prefixed(s))
}

/// `#[serde(flatten, with = "group_copy")]`: reads the copy back from the rollout
/// group's other fields.
pub(super) fn deserialize<'de, T: RolloutCopy, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_map(CopyVisitor(std::marker::PhantomData))
}

/// The name a field of the copy has in the rollout group, or `None` for `name`.
fn rollout_key(field: &str) -> Option<String> {
    match field {
        NAME => None,
        UNPREFIXED => Some(field.to_string()),
        f => Some(format!("{PREFIX}{f}")),
    }
}

/// The field of the copy a key of the rollout group names, if it names one.
fn copy_field<T: RolloutCopy>(key: &str) -> Option<&'static str> {
    let field = if key == UNPREFIXED {
        key
    } else {
        key.strip_prefix(PREFIX)?
    };
    T::fields()
        .iter()
        .copied()
        .find(|&f| f == field && f != NAME && (f == UNPREFIXED) == (key == UNPREFIXED))
}

/// Teleport's fields, written even when they are empty (as `0` or `[]`).
fn write_empty<M: SerializeMap>(map: &mut M, field: &str) -> Result<(), M::Error> {
    match field {
        "days" => map.serialize_entry("config_days", &Vec::<Day>::new()),
        "start_hour" => map.serialize_entry("config_start_hour", &0i64),
        "wait_hours" => map.serialize_entry("config_wait_hours", &0i64),
        UNPREFIXED => map.serialize_entry(UNPREFIXED, &0i64),
        _ => Ok(()),
    }
}

struct Prefixed<S>(S);

struct PrefixedFields<M>(M);

impl<M: SerializeMap> SerializeStruct for PrefixedFields<M> {
    type Ok = M::Ok;
    type Error = M::Error;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        field: &'static str,
        value: &T,
    ) -> Result<(), Self::Error> {
        match rollout_key(field) {
            Some(key) => self.0.serialize_entry(&key, value),
            None => Ok(()),
        }
    }

    fn skip_field(&mut self, field: &'static str) -> Result<(), Self::Error> {
        write_empty(&mut self.0, field)
    }

    fn end(self) -> Result<Self::Ok, Self::Error> {
        self.0.end()
    }
}

fn only_a_struct<E: ser::Error>() -> E {
    E::custom("a rollout's copy of a group is written from a struct")
}

impl<S: Serializer> Serializer for Prefixed<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Impossible<S::Ok, S::Error>;
    type SerializeTuple = Impossible<S::Ok, S::Error>;
    type SerializeTupleStruct = Impossible<S::Ok, S::Error>;
    type SerializeTupleVariant = Impossible<S::Ok, S::Error>;
    type SerializeMap = Impossible<S::Ok, S::Error>;
    type SerializeStruct = PrefixedFields<S::SerializeMap>;
    type SerializeStructVariant = Impossible<S::Ok, S::Error>;

    fn serialize_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, Self::Error> {
        Ok(PrefixedFields(self.0.serialize_map(Some(len))?))
    }

    fn serialize_bool(self, _: bool) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_i8(self, _: i8) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_i16(self, _: i16) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_i32(self, _: i32) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_i64(self, _: i64) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_u8(self, _: u8) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_u16(self, _: u16) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_u32(self, _: u32) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_u64(self, _: u64) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_f32(self, _: f32) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_f64(self, _: f64) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_char(self, _: char) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_str(self, _: &str) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<S::Ok, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        Err(only_a_struct())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        Err(only_a_struct())
    }
}

struct CopyVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: RolloutCopy> Visitor<'de> for CopyVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a rollout group's config_ fields")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        let mut copy = T::deserialize(de::value::MapAccessDeserializer::new(Unprefixed {
            map,
            name: Name::Owed,
            copy: std::marker::PhantomData::<T>,
        }))?;
        copy.read_back();
        Ok(copy)
    }
}

/// The copy's `name`, which the rollout group does not write: given as empty, after
/// the rollout group's own fields.
enum Name {
    Owed,
    KeyGiven,
    Given,
}

/// The rollout group's fields as the copy's: `config_` taken off, the others skipped.
struct Unprefixed<A, T> {
    map: A,
    name: Name,
    copy: std::marker::PhantomData<T>,
}

impl<'de, A: MapAccess<'de>, T: RolloutCopy> MapAccess<'de> for Unprefixed<A, T> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        while let Some(key) = self.map.next_key::<String>()? {
            match copy_field::<T>(&key) {
                Some(field) => {
                    return seed
                        .deserialize(de::value::BorrowedStrDeserializer::new(field))
                        .map(Some);
                }
                None => {
                    self.map.next_value::<IgnoredAny>()?;
                }
            }
        }
        match self.name {
            Name::Owed => {
                self.name = Name::KeyGiven;
                seed.deserialize(de::value::BorrowedStrDeserializer::new(NAME))
                    .map(Some)
            }
            Name::KeyGiven | Name::Given => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        match self.name {
            Name::KeyGiven => {
                self.name = Name::Given;
                seed.deserialize(de::value::BorrowedStrDeserializer::new(""))
            }
            Name::Owed | Name::Given => self.map.next_value_seed(seed),
        }
    }
}

/// The names of a struct's fields, as its `Deserialize` declares them (in order): what
/// a [`RolloutCopy`] answers with.
pub(super) fn struct_fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // The probe only records what it is asked for and fails: the error is expected.
    let _ = T::deserialize(FieldsProbe(&mut fields));
    fields
}

struct FieldsProbe<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for FieldsProbe<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(de::Error::custom("fields recorded"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::{GroupConfig, RolloutGroup};

    fn keys(v: &Value) -> Vec<&str> {
        let mut k: Vec<&str> = v
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        k.sort_unstable();
        k
    }

    #[test]
    fn an_empty_copy_writes_teleports_fields_and_no_others() {
        let v = serde_json::to_value(RolloutGroup::default()).unwrap();
        assert_eq!(
            keys(&v),
            [
                "canary_count",
                "config_days",
                "config_start_hour",
                "config_wait_hours",
                "failed_count",
                "initial_count",
                "last_update_reason",
                "name",
                "peak_count",
                "present_count",
                "progress",
                "state",
                "up_to_date_count",
            ]
        );
        assert_eq!(
            (
                &v["config_days"],
                &v["config_start_hour"],
                &v["canary_count"]
            ),
            (&json!([]), &json!(0), &json!(0))
        );
    }

    #[test]
    fn every_field_of_the_copy_reads_and_writes_under_its_rollout_name() {
        let written = json!({
            "name": "dev",
            "state": "active",
            "last_update_reason": "",
            "config_days": ["Mon"],
            "config_start_hour": 4,
            "config_windows": [{"days": ["Tue"], "start": "10:30", "duration": "2h"}],
            "config_timezone": "Europe/Paris",
            "config_blackouts": ["2026-12-24/2027-01-02"],
            "config_match_labels": {"zone": "a"},
            "config_topology": [{"key": "zone", "max_in_flight": 1}],
            "config_wait_hours": 24,
            "canary_count": 2,
            "config_canary_cover": ["arch"],
            "config_max_in_flight": "10%",
            "config_alert_after": "2h",
            "config_analysis": {"queries": [{"name": "errors", "query": "up", "max": 1.0}]},
            "peak_count": 0,
            "initial_count": 0,
            "present_count": 0,
            "up_to_date_count": 0,
            "failed_count": 0,
            "progress": 0.0,
        });
        let g: RolloutGroup = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(g.name, "dev");
        assert_eq!(g.config.name, "", "the copy's name is the group's own");
        assert_eq!(g.config.start_hour, Some(4));
        assert_eq!(g.config.wait_hours, 24);
        assert_eq!(g.config.canary_count, 2);
        assert_eq!(g.config.timezone.as_deref(), Some("Europe/Paris"));
        assert_eq!(g.config.canary_cover, ["arch"]);
        assert_eq!(g.config.topology.len(), 1);
        assert_eq!(g.config.blackouts.len(), 1);
        assert!(g.config.max_in_flight.is_some() && g.config.alert_after.is_some());
        assert!(g.config.analysis.is_some());
        assert_eq!(serde_json::to_value(&g).unwrap(), written);
    }

    #[test]
    fn fields_the_copy_does_not_hold_are_skipped_not_refused() {
        let g: RolloutGroup = serde_json::from_value(json!({
            "name": "dev",
            "config_name": "other",
            "config_canary_count": 3,
            "config_from_a_newer_replica": {"x": 1},
            "config_start_hour": 0,
        }))
        .unwrap();
        assert_eq!(g.name, "dev");
        assert_eq!(g.config, GroupConfig::default());
    }

    #[test]
    fn a_new_rollouts_copy_reads_back_equal() {
        let config: GroupConfig = serde_json::from_value(json!({
            "name": "dev", "days": ["Mon"], "start_hour": 0, "timezone": "UTC",
            "canary_count": 1, "wait_hours": 0,
        }))
        .unwrap();
        let g = RolloutGroup {
            name: "dev".into(),
            config: config.rollout_copy(),
            ..RolloutGroup::default()
        };
        let again: RolloutGroup =
            serde_json::from_str(&serde_json::to_string(&g).unwrap()).unwrap();
        assert_eq!(again, g);
        assert!(g.config.days.is_empty() && !g.config.windows.is_empty());
    }

    #[test]
    fn copies_differ_by_the_configs_field_names_the_schedule_as_one() {
        let a = GroupConfig::default();
        let b = GroupConfig {
            days: vec![crate::domain::window::Day::All],
            start_hour: Some(3),
            canary_count: 1,
            canary_cover: vec!["os".into()],
            ..GroupConfig::default()
        };
        assert_eq!(
            a.differing_fields(&b),
            ["window", "canary_count", "canary_cover"]
        );
        assert!(a.differing_fields(&a.clone()).is_empty());
    }
}
