//! The LLVM code-generation context every kernel builder shares: the module, an instruction
//! builder, the LLVM type of each dtype, and declarations of the intrinsics kernels call.
//!
//! Builder calls return `Result`; their failures (an unpositioned builder, a type mismatch)
//! are bugs of this backend, reported as `Err` naming what was being built, never a panic.

use crate::error::{Error, Result};
use crate::ir::DType;
use inkwell::builder::{Builder, BuilderError};
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum, FloatType, IntType};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValueEnum, FloatValue, FunctionValue, IntValue, ValueKind,
};
use inkwell::AddressSpace;

/// NVPTX address spaces: global memory (kernel pointer parameters) and shared memory.
pub const GLOBAL: u16 = 1;
pub const SHARED: u16 = 3;

/// An LLVM builder failure as kiln's error.
pub fn bx<T>(r: std::result::Result<T, BuilderError>) -> Result<T> {
    r.map_err(|e| Error::Unsupported(format!("ptx backend: llvm builder: {e}")))
}

pub struct Gen<'ctx> {
    pub ctx: &'ctx Context,
    pub module: Module<'ctx>,
    pub b: Builder<'ctx>,
    /// Code for the host CPU instead of NVPTX (the test oracle, `host.rs`): one thread
    /// (`tid = ctaid = 0`, `ntid = nctaid = 1`), no shuffles or barriers, address space 0.
    pub host: bool,
}

impl<'ctx> Gen<'ctx> {
    pub fn new(ctx: &'ctx Context, name: &str) -> Gen<'ctx> {
        Gen {
            ctx,
            module: ctx.create_module(name),
            b: ctx.create_builder(),
            host: false,
        }
    }

    /// A generator of host code (see [`Gen::host`]).
    pub fn new_host(ctx: &'ctx Context, name: &str) -> Gen<'ctx> {
        Gen {
            host: true,
            ..Gen::new(ctx, name)
        }
    }

    /// The address space of global (`GLOBAL`) or shared (`SHARED`) memory in this code.
    pub fn space(&self, nvptx: u16) -> AddressSpace {
        AddressSpace::from(if self.host { 0 } else { nvptx })
    }

    pub fn i1(&self) -> IntType<'ctx> {
        self.ctx.bool_type()
    }
    pub fn i8(&self) -> IntType<'ctx> {
        self.ctx.i8_type()
    }
    pub fn i32(&self) -> IntType<'ctx> {
        self.ctx.i32_type()
    }
    pub fn i64(&self) -> IntType<'ctx> {
        self.ctx.i64_type()
    }

    /// The float type of a float dtype.
    pub fn float_type(&self, d: DType) -> FloatType<'ctx> {
        if d == DType::F32 {
            self.ctx.f32_type()
        } else {
            self.ctx.f64_type()
        }
    }

    /// The type a value of dtype `d` has in registers: bools are `i1`.
    pub fn reg_type(&self, d: DType) -> BasicTypeEnum<'ctx> {
        match d {
            DType::Bool => self.i1().into(),
            DType::I32 => self.i32().into(),
            DType::I64 => self.i64().into(),
            DType::F32 | DType::F64 => self.float_type(d).into(),
            // The bits: conversions are `math::half`'s integer code, as on the CPU.
            DType::F16 | DType::BF16 => self.ctx.i16_type().into(),
        }
    }

    /// The type a value of dtype `d` has in memory: bools are one byte (ndarray's `bool`).
    pub fn mem_type(&self, d: DType) -> BasicTypeEnum<'ctx> {
        match d {
            DType::Bool => self.i8().into(),
            _ => self.reg_type(d),
        }
    }

    /// `i64` constant.
    /// Bytes of one element of `d` in memory.
    pub fn mem_size(&self, d: DType) -> u32 {
        match d {
            DType::Bool => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    pub fn c64(&self, v: i64) -> IntValue<'ctx> {
        self.i64().const_int(v as u64, true)
    }
    pub fn c32(&self, v: i64) -> IntValue<'ctx> {
        self.i32().const_int(v as u64, true)
    }

    /// The declaration of the intrinsic (or other external function) `name`, added once.
    pub fn declare(
        &self,
        name: &str,
        ret: Option<BasicTypeEnum<'ctx>>,
        params: &[BasicMetadataTypeEnum<'ctx>],
    ) -> FunctionValue<'ctx> {
        if let Some(f) = self.module.get_function(name) {
            return f;
        }
        let ty = match ret {
            Some(r) => r.fn_type(params, false),
            None => self.ctx.void_type().fn_type(params, false),
        };
        self.module.add_function(name, ty, None)
    }

    /// Calls `name` (declared on first use) and returns its value.
    pub fn call(
        &self,
        name: &str,
        ret: BasicTypeEnum<'ctx>,
        args: &[BasicValueEnum<'ctx>],
    ) -> Result<BasicValueEnum<'ctx>> {
        let params: Vec<BasicMetadataTypeEnum> = args.iter().map(|a| a.get_type().into()).collect();
        let f = self.declare(name, Some(ret), &params);
        let args: Vec<BasicMetadataValueEnum> = args.iter().map(|&a| a.into()).collect();
        match bx(self.b.build_call(f, &args, ""))?.try_as_basic_value() {
            ValueKind::Basic(v) => Ok(v),
            ValueKind::Instruction(_) => Err(Error::Unsupported(format!(
                "ptx backend: {name} returns no value"
            ))),
        }
    }

    /// `__syncthreads()` (nothing on the host, which runs one thread).
    pub fn barrier(&self) -> Result<()> {
        if self.host {
            return Ok(());
        }
        self.call_void("llvm.nvvm.barrier0")
    }

    /// Calls the void function `name`.
    pub fn call_void(&self, name: &str) -> Result<()> {
        let f = self.declare(name, None, &[]);
        bx(self.b.build_call(f, &[], ""))?;
        Ok(())
    }

    /// A float intrinsic of one or more arguments of the same type (`llvm.fma`, `llvm.sqrt`,
    /// ...), overloaded on that type: `llvm.NAME.f32` / `.f64`.
    pub fn fcall(&self, name: &str, args: &[FloatValue<'ctx>]) -> Result<FloatValue<'ctx>> {
        let ty = args[0].get_type();
        let suffix = if ty == self.ctx.f32_type() {
            "f32"
        } else {
            "f64"
        };
        let args: Vec<BasicValueEnum> = args.iter().map(|&a| a.into()).collect();
        Ok(self
            .call(&format!("llvm.{name}.{suffix}"), ty.into(), &args)?
            .into_float_value())
    }

    /// A special register of PTX (`tid.x`, `ctaid.x`, `ntid.x`, `nctaid.x`), as `i64`.
    pub fn sreg(&self, name: &str) -> Result<IntValue<'ctx>> {
        if self.host {
            return Ok(self.c64(name.starts_with('n') as i64));
        }
        let v = self
            .call(
                &format!("llvm.nvvm.read.ptx.sreg.{name}"),
                self.i32().into(),
                &[],
            )?
            .into_int_value();
        bx(self.b.build_int_z_extend(v, self.i64(), name))
    }

    /// The pointer type of global memory.
    pub fn global_ptr(&self) -> inkwell::types::PointerType<'ctx> {
        self.ctx.ptr_type(self.space(GLOBAL))
    }

    /// A block's array `name` of 32 `word`s in shared memory (a partial per warp), 8-byte
    /// aligned, not initialized.
    pub fn warp_partials(
        &self,
        word: IntType<'ctx>,
        name: &str,
    ) -> inkwell::values::PointerValue<'ctx> {
        let ty = word.array_type(32);
        let smem = self.module.add_global(ty, Some(self.space(SHARED)), name);
        smem.set_linkage(inkwell::module::Linkage::Internal);
        smem.set_initializer(&ty.get_undef());
        smem.set_alignment(8);
        smem.as_pointer_value()
    }
}
