//! `cargo run --release -p hurricane-bench --example bench -- NAME [--quick]`:
//! the same as `hurricane bench NAME [--quick]`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(hurricane_bench::main_with_args(&args));
}
