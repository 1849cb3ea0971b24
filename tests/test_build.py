"""The build runtime's GPU-free parts: content-hash keys, target architectures and flags, manifest validation, the
cache folder, and kgen_load_extension with the GPU, the compiler and the loader faked (GPU tests of real builds are
in test_hardening.py)."""

import sys
import types

import pytest
import torch

from kgen import build


@pytest.fixture
def no_arch_env(monkeypatch):
    for var in ("TORCH_CUDA_ARCH_LIST", "KGEN_FORCE_SM80", "KGEN_CACHE_DIR", "TORCH_EXTENSIONS_DIR"):
        monkeypatch.delenv(var, raising=False)


def test_key_covers_sources_and_arch(no_arch_env):
    k = build.kgen_build_key("cu", "cpp", ["9.0"])
    assert k == build.kgen_build_key("cu", "cpp", ["9.0"])
    assert len({k, build.kgen_build_key("cu2", "cpp", ["9.0"]), build.kgen_build_key("cu", "cpp2", ["9.0"]),
                build.kgen_build_key("cu", "cpp", ["8.0"]), build.kgen_build_key("cu", "cpp", ["9.0+PTX"]),
                build.kgen_build_key("cu", "cpp", ["8.0", "9.0"])}) == 6


def test_force_sm80_changes_define_and_key(no_arch_env, monkeypatch):
    k = build.kgen_build_key("cu", "cpp", ["9.0"])
    assert build.kgen_compile_flags(["9.0"]) == (["-O3", "-DKGEN_SM90=1", "-DKGEN_SM90A=0"],
                                                 ["-O3", "-lineinfo", "-DKGEN_SM90=1", "-DKGEN_SM90A=0"])
    assert build.kgen_compile_flags(["9.0a"])[1][-2:] == ["-DKGEN_SM90=1", "-DKGEN_SM90A=1"]
    monkeypatch.setenv("KGEN_FORCE_SM80", "1")
    assert not build.kgen_sm90_path(["9.0"]) and not build.kgen_wgmma_path(["9.0a"])
    assert build.kgen_compile_flags(["9.0a"])[1][-2:] == ["-DKGEN_SM90=0", "-DKGEN_SM90A=0"]
    assert build.kgen_build_key("cu", "cpp", ["9.0"]) != k


@pytest.mark.parametrize("archs, sm90", [(["9.0"], True), (["9.0a"], True), (["10.0", "9.0+PTX"], True),
                                         (["8.0"], False), (["8.0", "9.0"], False), (["8.9+PTX"], False)])
def test_sm90_path_needs_every_target_at_sm90(no_arch_env, archs, sm90):
    assert build.kgen_sm90_path(archs) is sm90


@pytest.mark.parametrize("archs, wgmma", [(["9.0a"], True), (["9.0"], False), (["9.0", "9.0a"], False),
                                          (["9.0a", "10.0"], False), (["9.0a+PTX"], True), (["8.0", "9.0a"], False)])
def test_wgmma_path_needs_every_target_at_sm90a(no_arch_env, archs, wgmma):
    """KGEN_SM90A: the host launches wgmma-only kernels only where every device image is sm_90a code."""
    assert build.kgen_wgmma_path(archs) is wgmma


def test_no_compile_flag_names_an_arch(no_arch_env):
    """torch's _get_cuda_arch_flags drops its own -gencode flags when any extra nvcc flag contains 'arch', which would
    silently ignore a set TORCH_CUDA_ARCH_LIST."""
    for archs in (["8.0"], ["9.0"]):
        cxx, nvcc = build.kgen_compile_flags(archs)
        assert not [f for f in cxx + nvcc if "arch" in f]


def test_parse_arch_list_as_torch_reads_it():
    assert build.kgen_parse_arch_list("9.0 8.0") == ["8.0", "9.0"]
    assert build.kgen_parse_arch_list("9.0;8.6;8.0;9.0") == ["8.0", "8.6", "9.0"]
    assert build.kgen_parse_arch_list("Hopper") == ["9.0+PTX"]
    assert build.kgen_parse_arch_list("Ampere;Hopper") == ["8.0", "8.6+PTX", "9.0+PTX"]
    assert build.kgen_parse_arch_list("12.0;9.0") == ["9.0", "12.0"]  # by version, not text
    with pytest.raises(RuntimeError, match=r"includes 7\.5.*8\.0\+"):
        build.kgen_parse_arch_list("7.5;8.0")
    with pytest.raises(RuntimeError, match="unknown entry 'sm_90'"):
        build.kgen_parse_arch_list("sm_90")


def test_gencode_flags_match_torch():
    from torch.utils.cpp_extension import _get_cuda_arch_flags

    for text in ("8.0", "8.0;9.0", "8.6 9.0+PTX", "Hopper", "9.0a"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TORCH_CUDA_ARCH_LIST", text)
            assert sorted(build.kgen_gencode_flags(build.kgen_parse_arch_list(text))) == _get_cuda_arch_flags()


def test_target_archs(no_arch_env, monkeypatch):
    # an H100 / H200 builds sm_90a (wgmma in the halo forward), with the sm_90 (Hopper) path's define
    assert build.kgen_target_archs((9, 0), []) == ["9.0a"]
    assert build.kgen_gencode_flags(["9.0a"]) == ["-gencode=arch=compute_90a,code=sm_90a"] and build.kgen_sm90_path(["9.0a"])
    assert build.kgen_target_archs((10, 0), []) == ["10.0"]
    assert build.kgen_target_archs((8, 6), ["sm_80", "sm_86", "sm_90"]) == ["8.6"]
    # newer than this torch build knows: its newest SASS target plus PTX, as torch does
    assert build.kgen_target_archs((12, 0), ["sm_80", "sm_90", "compute_90"]) == ["9.0+PTX"]
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "native")
    assert build.kgen_target_archs((9, 0), []) == ["9.0a"]
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0;8.0")
    assert build.kgen_target_archs((9, 0), []) == ["8.0", "9.0"]  # the user's list wins over the device
    assert build.kgen_target_archs() == ["8.0", "9.0"]  # and needs no GPU


def test_device_checks():
    with pytest.raises(RuntimeError, match=r"Tesla T4 has compute capability 7\.5.*8\.0\+"):
        build.kgen_check_device((7, 5), "Tesla T4")
    build.kgen_check_device((8, 0), "A100")
    build.kgen_check_archs(["8.0"], (8, 6), "RTX 3090")  # sm_80 code runs on sm_86
    build.kgen_check_archs(["8.0+PTX"], (9, 0), "H100")  # PTX JIT-compiles for newer GPUs
    build.kgen_check_archs(["9.0a"], (9, 0), "H100")
    for archs, capability in ((["8.0"], (9, 0)), (["8.6"], (8, 0)), (["9.0a"], (10, 0)), (["9.0+PTX"], (8, 6))):
        with pytest.raises(RuntimeError, match=r"no code that runs on the GPU G \(sm_%d%d\); add %d\.%d" % (capability * 2)):
            build.kgen_check_archs(archs, capability, "G")


def test_manifest_must_match_key_and_shared_object(tmp_path):
    so, manifest = tmp_path / "x.so", tmp_path / "kgen_manifest.txt"
    so.write_bytes(b"\x7fELF" + b"1" * 100)
    assert not build.kgen_cache_valid(str(so), str(manifest), "k")  # no manifest: an interrupted build
    manifest.write_text(f"key k\nso_sha256 {build.kgen_file_sha256(str(so))}\n")
    assert build.kgen_cache_valid(str(so), str(manifest), "k")
    assert not build.kgen_cache_valid(str(so), str(manifest), "other-key")
    so.write_bytes(so.read_bytes()[:50])  # truncated shared object
    assert not build.kgen_cache_valid(str(so), str(manifest), "k")
    manifest.write_bytes(b"\x00garbage{\xff\xfe")
    assert not build.kgen_cache_valid(str(so), str(manifest), "k")


def test_cache_dir_precedence(no_arch_env, monkeypatch, tmp_path):
    assert build.kgen_cache_dir().endswith("/.cache/kgen")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "te"))
    assert build.kgen_cache_dir() == str(tmp_path / "te" / "kgen")
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "kc"))
    assert build.kgen_cache_dir() == str(tmp_path / "kc")


def test_make_dir_under_a_file_is_one_clear_error(tmp_path):
    build.kgen_make_dir(str(tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b").is_dir()
    (tmp_path / "f").write_text("")
    with pytest.raises(RuntimeError, match=r"^kgen: cache folder .*/f/c: .*/f is a file, not a folder; set "
                                           r"KGEN_CACHE_DIR to a writable folder$"):
        build.kgen_make_dir(str(tmp_path / "f" / "c"))


@pytest.fixture
def fake_gpu(monkeypatch, no_arch_env, tmp_path):
    """kgen_load_extension on a pretend GPU: the compiler writes a fake .so, the importer records its path."""
    gpu = types.SimpleNamespace(capability=(9, 0), name="NVIDIA H100", compiled=[], loaded=[])
    monkeypatch.setitem(sys.modules, "kgen_runtime_state", types.SimpleNamespace(loaded={}, registered=set()))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: gpu.capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: gpu.name)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_80", "sm_90"])
    def import_(ext_name, so_path):
        gpu.loaded.append(so_path)
        return types.SimpleNamespace(__name__=ext_name)

    monkeypatch.setattr(build, "kgen_import", import_)

    def compile_(ext_name, build_dir, cuda_source, cpp_source, archs):
        gpu.compiled.append((ext_name, archs))
        with open(f"{build_dir}/{ext_name}.so", "wb") as f:
            f.write(b"\x7fELF fake")

    monkeypatch.setattr(build, "kgen_compile", compile_)
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "cache"))
    return gpu


def forget_loaded():
    sys.modules["kgen_runtime_state"].loaded.clear()


def test_first_build_prints_one_line_and_a_hit_prints_nothing(fake_gpu, capsys, tmp_path):
    name = build.kgen_load_extension("kgen_fam_00000000", "cu", "cpp").__name__
    assert name.startswith("kgen_fam_") and fake_gpu.compiled == [(name, ["9.0a"])]  # an H100 / H200: sm_90a
    assert capsys.readouterr().err == f"kgen: building {name} for sm_90a (first use; cached under {tmp_path / 'cache'})\n"
    manifest = (tmp_path / "cache" / name / "kgen_manifest.txt").read_text()
    assert "\narch 9.0a\n" in manifest and "\nsm90 1\n" in manifest and "\narch_env -\n" in manifest
    assert build.kgen_load_extension("kgen_fam_00000000", "cu", "cpp").__name__ == name  # same process: nothing to do
    forget_loaded()  # a new process: loads from the cache
    assert build.kgen_load_extension("kgen_fam_00000000", "cu", "cpp").__name__ == name
    assert len(fake_gpu.compiled) == 1 and len(fake_gpu.loaded) == 2
    assert capsys.readouterr().err == ""


def test_arch_list_and_force_sm80_give_their_own_builds(fake_gpu, monkeypatch, capsys, tmp_path):
    names = {build.kgen_load_extension("kgen_fam_00000000", "cu", "cpp").__name__}
    forget_loaded()
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0+PTX")  # the sm_80 path, JIT-compiled on the H100
    names.add(build.kgen_load_extension("kgen_fam_00000000", "cu", "cpp").__name__)
    assert "for sm_80+PTX" in capsys.readouterr().err
    manifest = (tmp_path / "cache" / sorted(names - {fake_gpu.compiled[0][0]})[0] / "kgen_manifest.txt").read_text()
    assert "\narch 8.0+PTX\n" in manifest and "\nsm90 0\n" in manifest and "\narch_env 8.0+PTX\n" in manifest
    forget_loaded()
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    monkeypatch.setenv("KGEN_FORCE_SM80", "1")
    names.add(build.kgen_load_extension("kgen_fam_00000000", "cu", "cpp").__name__)
    assert len(names) == 3 and len(fake_gpu.compiled) == 3


def test_old_gpu_is_refused_before_any_compile(fake_gpu, tmp_path):
    fake_gpu.capability, fake_gpu.name = (7, 5), "Tesla T4"
    with pytest.raises(RuntimeError, match=r"Tesla T4 has compute capability 7\.5.*8\.0\+"):
        build.kgen_load_extension("kgen_fam_00000000", "cu", "cpp")
    assert fake_gpu.compiled == [] and not (tmp_path / "cache").exists()


def test_unusable_cache_is_one_clear_error(fake_gpu, monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "file" / "cache"))
    with pytest.raises(RuntimeError, match=r"cache folder .*file/cache: .* not a folder; set KGEN_CACHE_DIR"):
        build.kgen_load_extension("kgen_fam_00000000", "cu", "cpp")
    assert fake_gpu.compiled == []
