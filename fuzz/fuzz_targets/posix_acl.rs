#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| hurricane_fuzz::posix_acl(data));
