#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zrpc_server::fuzzing::server_conf(data));
