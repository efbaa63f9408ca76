//! NVRTC for real: compiles a kernel to CUBIN and PTX, and a broken one to an error.
//! Needs no GPU, only the NVRTC library (`scripts/install-nvrtc.sh`, then `SDFLOW_NVRTC`);
//! without it each test says it is skipped and passes.

use sdflow_codegen::CodegenError;
use sdflow_codegen::cuda::nvrtc::{self, Arch, NvrtcOptions, Output};

const KERNEL: &str = r#"extern "C" __global__ void axpy(double* y, const double* x, double a, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
"#;

/// `true` (and a note on stderr) when NVRTC cannot be found.
fn skip() -> bool {
    match nvrtc::available() {
        Ok(info) => {
            eprintln!("using {info}");
            false
        }
        Err(reason) => {
            eprintln!("skipped: NVRTC not found ({reason})");
            true
        }
    }
}

#[test]
fn compiles_to_cubin_for_sm_90() {
    if skip() {
        return;
    }
    let info = nvrtc::available().unwrap();
    assert!(info.major >= 12, "{info}");
    let out = nvrtc::compile(KERNEL, "axpy.cu", &NvrtcOptions::default(), Output::Cubin)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.kind, Output::Cubin);
    assert!(out.image.len() > 64);
    assert_eq!(&out.image[..4], b"\x7fELF", "a CUBIN is an ELF image");
}

#[test]
fn compiles_to_ptx_without_fused_multiply_add() {
    if skip() {
        return;
    }
    let opts = NvrtcOptions {
        arch: Arch::new(9, 0),
        extra: vec!["-lineinfo".into()],
    };
    let out =
        nvrtc::compile(KERNEL, "axpy.cu", &opts, Output::Ptx).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.kind, Output::Ptx);
    let ptx = String::from_utf8(out.image).expect("PTX is text");
    assert!(!ptx.ends_with('\0'));
    assert!(ptx.contains(".target sm_90"), "{ptx}");
    assert!(ptx.contains(".entry axpy"), "{ptx}");
    // --fmad=false: `a * x + y` stays a rounded multiply and a rounded add.
    assert!(ptx.contains("mul.rn.f64"), "{ptx}");
    assert!(ptx.contains("add.rn.f64"), "{ptx}");
    assert!(!ptx.contains("fma.rn.f64"), "{ptx}");
}

#[test]
fn a_syntax_error_is_a_compiler_error_with_the_line() {
    if skip() {
        return;
    }
    let broken = KERNEL.replace("y[i] = a * x[i] + y[i];", "y[i] = a * x[i] + ;");
    let err = nvrtc::compile(
        &broken,
        "broken.cu",
        &NvrtcOptions::default(),
        Output::Cubin,
    )
    .unwrap_err();
    let CodegenError::Compiler {
        message,
        source_file,
    } = &err
    else {
        panic!("not a compiler error: {err:?}");
    };
    assert!(source_file.is_none());
    assert!(message.contains("broken.cu(4): error"), "{message}");
    assert!(message.contains("expected an expression"), "{message}");
    assert!(
        message.contains("> 4 |         y[i] = a * x[i] + ;"),
        "{message}"
    );
    assert!(message.contains("sm_90"), "{message}");
}

#[test]
fn an_unknown_option_is_a_compiler_error() {
    if skip() {
        return;
    }
    let opts = NvrtcOptions {
        arch: Arch::default(),
        extra: vec!["--no-such-option".into()],
    };
    let err = nvrtc::compile(KERNEL, "axpy.cu", &opts, Output::Ptx).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("--no-such-option"), "{msg}");
}
