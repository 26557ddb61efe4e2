#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zrpc_client::fuzzing::client_conf(data));
