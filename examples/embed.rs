//! Embedding mcir in a Rust program: compile a model once, then evaluate it and its
//! gradient many times on your own buffers. Run with
//! `cargo run --release -p mcir --example embed`.

use mcir::{Arg, GradSlot, Program, Value};

const MODEL: &str = r#"
// Mean squared error of a linear model y = w . x + b over rows of `xs`.
fn loss(w: f64[], b: f64, xs: f64[,], ys: f64[]) -> f64 {
    let mut total = 0.0;
    for i in 0..size(xs, 0) {
        let mut pred = b;
        for j in 0..len(w) {
            pred += w[j] * xs[i, j];
        }
        let e = pred - ys[i];
        total += e * e;
    }
    return total / f64(size(xs, 0));
}
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let program = Program::compile("model.mcir", MODEL)?;
    let loss = program.function("loss")?.expect_signature("fn(f64[], f64, f64[,], f64[]) -> f64")?;

    // Data: ys = 2 x0 - x1 + 0.5, exactly.
    let xs: Vec<f64> = (0..40).map(|k| ((k * 7) % 11) as f64 / 11.0).collect();
    let ys: Vec<f64> = xs.chunks(2).map(|r| 2.0 * r[0] - r[1] + 0.5).collect();
    let (mut xs, mut ys) = (xs, ys);

    // Gradient descent with a prepared handle: no allocation from one step to the next.
    let mut prepared = loss.prepare()?;
    let (mut w, mut b) = (vec![0.0, 0.0], 0.0);
    let (mut gw, mut gb) = (vec![0.0; 2], 0.0);
    for step in 0..2000 {
        let l = prepared.value_and_gradient(
            &mut [
                Arg::F64Array(&mut w, &[2]),
                Arg::F64(b),
                Arg::F64Array(&mut xs, &[20, 2]),
                Arg::F64Array(&mut ys, &[20]),
            ],
            &mut [GradSlot::Array(&mut gw), GradSlot::F64(&mut gb), GradSlot::Skip, GradSlot::Skip],
        )?;
        for (wi, gi) in w.iter_mut().zip(&gw) {
            *wi -= 0.5 * gi;
        }
        b -= 0.5 * gb;
        if step % 500 == 0 {
            println!("step {step:4}: loss {l:.3e}");
        }
    }
    println!("w = {w:.4?}, b = {b:.4}");

    // The value interface: runtime values in, values out.
    let (value, gradient) = loss.value_and_gradient(&[
        Value::vector(w.clone()),
        Value::F64(b),
        Value::f64_array(xs.clone(), &[20, 2]).ok_or("shape")?,
        Value::vector(ys.clone()),
    ])?;
    println!("loss {value:.3e}, d/dw {:?}", gradient[0].to_f64_vec());
    Ok(())
}
