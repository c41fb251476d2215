fn main() {
    let src = std::fs::read_to_string("benches/programs/mlp.mcir").unwrap();
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let p = mcir::Program::compile("mlp.mcir", &src).unwrap();
        let t1 = t.elapsed();
        p.native().unwrap();
        let t2 = t.elapsed();
        let mut d = p.differentiate(&Default::default()).unwrap();
        let t3 = t.elapsed();
        let id = p.module().func_by_name("mlp").unwrap();
        let drv = d.driver(id).unwrap();
        let t4 = t.elapsed();
        let _j = mcir_jit::Jit::compile_reachable(d.module(), &[drv]).unwrap();
        let t5 = t.elapsed();
        println!(
            "compile {:?} native {:?} derive {:?} driver {:?} jit-derived {:?}",
            t1,
            t2 - t1,
            t3 - t2,
            t4 - t3,
            t5 - t4
        );
    }
}
