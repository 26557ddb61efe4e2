#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zrpc_client::fuzzing::k8s_answers(data));
