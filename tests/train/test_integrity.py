"""Checkpoint file lists (slm.train.integrity) on their own: what passes, what is passed over and why."""

from __future__ import annotations

from slm.train import integrity


def _checkpoint(root, name: str, payload: bytes):
    folder = root / name
    folder.mkdir()
    (folder / "trainer.pt").write_bytes(payload)
    (folder / "worker-0.pt").write_bytes(b"rng")
    integrity.write_list(folder, 0, {"trainer.pt", "worker-0.pt"})
    return folder


def test_the_newest_whole_checkpoint_is_taken_and_the_others_named(tmp_path):
    old = _checkpoint(tmp_path, "step-00000010", b"a" * 100)
    new = _checkpoint(tmp_path, "step-00000020", b"b" * 100)
    said = []
    assert integrity.newest_whole([old, new], said.append) == new and not said
    (new / "trainer.pt").write_bytes(b"b" * 50)  # cut short
    assert integrity.problem(new) == "trainer.pt is 50 bytes, 100 were written"
    assert integrity.newest_whole([old, new], said.append) == old
    assert said == ["resuming from step-00000010, the newest whole checkpoint (passed over: step-00000020: "
                    "trainer.pt is 50 bytes, 100 were written)"]
    (old / "trainer.pt").write_bytes(b"c" * 100)  # same size, other bytes
    assert integrity.problem(old) == "trainer.pt changed since it was written (SHA-256 differs)"
    (old / "trainer.pt").write_bytes(b"a" * 100)
    (old / "worker-0.pt").unlink()
    assert integrity.problem(old) == "worker-0.pt missing"
    said.clear()
    assert integrity.newest_whole([old, new], said.append) is None and "starting from step 0" in said[0]


def test_a_checkpoint_without_lists_is_taken_as_it_is(tmp_path):
    legacy = tmp_path / "step-00000010"  # written before the lists existed
    legacy.mkdir()
    (legacy / "trainer.pt").write_bytes(b"x")
    assert integrity.problem(legacy) is None
