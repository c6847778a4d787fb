//! A short, deterministic run of the `tool_arguments` fuzz harness (the same code `cargo fuzz` drives), so CI
//! exercises it on stable: structured inputs (deep nesting, broken JSON, casts) and random bytes.

use nanobot_tools::fuzzing::tool_arguments;

/// xorshift64*: a fixed sequence, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "'",
    "\\",
    "\"path\"",
    "\"count\"",
    "\"nested\"",
    "\"deep\"",
    "\"tags\"",
    "\"flag\"",
    "\"ratio\"",
    "\"120\"",
    "\"yes\"",
    "1e999",
    "-0",
    "null",
    "true",
    "\n",
    "```json",
    "\u{0}",
    "é",
    "\"{\\\"a\\\":1}\"",
    "\"[1,2]\"",
    "1.5",
    "9007199254740993",
    "\"\\ud800\"",
];

fn structured(rng: &mut Rng) -> String {
    let mut s = String::new();
    for _ in 0..rng.below(60) {
        s.push_str(PIECES[rng.below(PIECES.len())]);
    }
    s
}

fn nested(rng: &mut Rng) -> String {
    let depth = [10, 63, 64, 65, 200, 5_000, 100_000][rng.below(7)];
    let (open, close) = [("[", "]"), ("{\"nested\":", "}"), ("{'a': ", "}")][rng.below(3)];
    let body = format!("{}1{}", open.repeat(depth), close.repeat(rng.below(depth + 1)));
    format!("{{\"path\": \"x\", \"nested\": {{\"deep\": {body}}}}}")
}

fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    (0..rng.below(200)).map(|_| rng.next() as u8).collect()
}

#[test]
fn the_tool_argument_harness_survives_a_deterministic_run() {
    // A 1 MiB stack: a walk that recursed over the nesting of these inputs would overflow it.
    let run = std::thread::Builder::new()
        .stack_size(1024 * 1024)
        .spawn(|| {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
            let mut parsed = 0usize;
            for i in 0..3_000 {
                let input: Vec<u8> = match i % 3 {
                    0 => structured(&mut rng).into_bytes(),
                    1 => nested(&mut rng).into_bytes(),
                    _ => random_bytes(&mut rng),
                };
                if let Some(v) = tool_arguments(&input) {
                    assert!(v.is_object(), "parsing yields objects only: {v}");
                    assert!(nanobot_types::json_limits::value_depth(&v) <= 64);
                    parsed += 1;
                }
            }
            parsed
        })
        .unwrap();
    let parsed = run.join().unwrap();
    // The run reaches past parsing into casting and validation, not only the refusals.
    assert!(parsed > 100, "only {parsed} inputs parsed");
}
