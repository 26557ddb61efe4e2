#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zrpc_core::fuzzing::grpc_message(data));
