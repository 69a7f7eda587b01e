//! The chosen-log entry as raft-engine stores it.
//!
//! raft-engine 0.4.2 only stores entries that implement rust-protobuf 2.x `Message` (`MessageExt::Entry`), and
//! learns an entry's log index through `MessageExt::index` (docs/ARCHITECTURE.md §6). We do not need generated code for one
//! two-field message, so this is a hand-written implementation of the wire format
//! `message ChosenEntry { uint64 instance = 1; bytes value = 2; }`, where `value` is `Value::encode()`.
//! Reflection (`descriptor`) is never used by raft-engine and is not provided.

use std::any::Any;

use protobuf::rt;
use protobuf::{CachedSize, CodedInputStream, CodedOutputStream, Message, ProtobufResult, UnknownFields};

use paxsql_paxos::Instance;

const FIELD_INSTANCE: u32 = 1;
const FIELD_VALUE: u32 = 2;

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ChosenEntry {
    pub instance: Instance,
    /// `Value::encode()` of the chosen value; decoded (and checked) only when read back.
    pub value: Vec<u8>,
    unknown_fields: UnknownFields,
    cached_size: CachedSize,
}

impl ChosenEntry {
    pub fn new(instance: Instance, value: Vec<u8>) -> Self {
        ChosenEntry { instance, value, ..Default::default() }
    }
}

/// Ties [`ChosenEntry`] to raft-engine: the raft-engine log index of an entry is its Paxos instance.
pub(crate) struct ChosenLog;

impl raft_engine::MessageExt for ChosenLog {
    type Entry = ChosenEntry;

    fn index(e: &ChosenEntry) -> u64 {
        e.instance
    }
}

impl protobuf::Clear for ChosenEntry {
    fn clear(&mut self) {
        self.instance = 0;
        self.value.clear();
        self.unknown_fields.clear();
    }
}

impl Message for ChosenEntry {
    fn descriptor(&self) -> &'static protobuf::reflect::MessageDescriptor {
        // raft-engine never reflects on entries; generating a descriptor would need protoc output.
        unimplemented!("ChosenEntry has no reflection descriptor")
    }

    fn is_initialized(&self) -> bool {
        true
    }

    fn merge_from(&mut self, is: &mut CodedInputStream) -> ProtobufResult<()> {
        while !is.eof()? {
            let (field, wire_type) = is.read_tag_unpack()?;
            match field {
                FIELD_INSTANCE => {
                    if wire_type != protobuf::wire_format::WireTypeVarint {
                        return Err(rt::unexpected_wire_type(wire_type));
                    }
                    self.instance = is.read_uint64()?;
                }
                FIELD_VALUE => {
                    if wire_type != protobuf::wire_format::WireTypeLengthDelimited {
                        return Err(rt::unexpected_wire_type(wire_type));
                    }
                    self.value = is.read_bytes()?;
                }
                _ => rt::read_unknown_or_skip_group(field, wire_type, is, &mut self.unknown_fields)?,
            }
        }
        Ok(())
    }

    fn compute_size(&self) -> u32 {
        let mut size = 0;
        if self.instance != 0 {
            size += rt::value_size(FIELD_INSTANCE, self.instance, protobuf::wire_format::WireTypeVarint);
        }
        if !self.value.is_empty() {
            size += rt::bytes_size(FIELD_VALUE, &self.value);
        }
        size += rt::unknown_fields_size(&self.unknown_fields);
        self.cached_size.set(size);
        size
    }

    fn write_to_with_cached_sizes(&self, os: &mut CodedOutputStream) -> ProtobufResult<()> {
        if self.instance != 0 {
            os.write_uint64(FIELD_INSTANCE, self.instance)?;
        }
        if !self.value.is_empty() {
            os.write_bytes(FIELD_VALUE, &self.value)?;
        }
        os.write_unknown_fields(&self.unknown_fields)?;
        Ok(())
    }

    fn get_cached_size(&self) -> u32 {
        self.cached_size.get()
    }

    fn get_unknown_fields(&self) -> &UnknownFields {
        &self.unknown_fields
    }

    fn mut_unknown_fields(&mut self) -> &mut UnknownFields {
        &mut self.unknown_fields
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn new() -> Self {
        Self::default()
    }

    fn default_instance() -> &'static Self {
        static DEFAULT: std::sync::OnceLock<ChosenEntry> = std::sync::OnceLock::new();
        DEFAULT.get_or_init(ChosenEntry::default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_protobuf_wire_format() {
        let e = ChosenEntry::new(300, vec![1, 2, 3]);
        let bytes = e.write_to_bytes().unwrap();
        // field 1 varint: tag 0x08, 300 = 0xac 0x02; field 2 bytes: tag 0x12, length 3, payload.
        assert_eq!(bytes, vec![0x08, 0xac, 0x02, 0x12, 0x03, 1, 2, 3]);
        let back: ChosenEntry = <ChosenEntry as Message>::parse_from_bytes(&bytes).unwrap();
        assert_eq!((back.instance, back.value), (300, vec![1, 2, 3]));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [&[0x08][..], &[0x12, 0x05, 1], &[0x0a, 0x01, 0], &[0xff; 12]] {
            assert!(<ChosenEntry as Message>::parse_from_bytes(bad).is_err(), "{bad:?}");
        }
    }
}
