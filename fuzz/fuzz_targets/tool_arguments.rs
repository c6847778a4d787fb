//! Tool-call argument text from the model: lenient parsing, casting and validation must return on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = nanobot_tools::fuzzing::tool_arguments(data);
});
