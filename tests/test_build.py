"""The build cache's GPU-free parts: content-hash keys and manifest validation (GPU tests of real builds are in
test_hardening.py)."""

from kgen import build


def test_key_covers_sources_and_arch():
    k = build.kgen_build_key("cu", "cpp", "9.0")
    assert k == build.kgen_build_key("cu", "cpp", "9.0")
    assert len({k, build.kgen_build_key("cu2", "cpp", "9.0"), build.kgen_build_key("cu", "cpp2", "9.0"),
                build.kgen_build_key("cu", "cpp", "8.0")}) == 4


def test_manifest_must_match_key_and_shared_object(tmp_path):
    so, manifest = tmp_path / "x.so", tmp_path / "kgen_manifest.txt"
    so.write_bytes(b"\x7fELF" + b"1" * 100)
    assert not build.kgen_cache_valid(str(so), str(manifest), "k")  # no manifest: an interrupted build
    manifest.write_text(f"key k\nso_sha256 {build.kgen_file_sha256(str(so))}\n")
    assert build.kgen_cache_valid(str(so), str(manifest), "k")
    assert not build.kgen_cache_valid(str(so), str(manifest), "other-key")
    so.write_bytes(so.read_bytes()[:50])  # truncated shared object
    assert not build.kgen_cache_valid(str(so), str(manifest), "k")
    manifest.write_bytes(b"\x00garbage{")
    assert not build.kgen_cache_valid(str(so), str(manifest), "k")


def test_cache_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path))
    assert build.kgen_cache_dir() == str(tmp_path)
    monkeypatch.delenv("KGEN_CACHE_DIR")
    assert build.kgen_cache_dir().endswith("/.cache/kgen")
