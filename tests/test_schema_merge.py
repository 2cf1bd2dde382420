"""A config section is merged over a fresh copy of its schema (unpickled, not deep-copied):
the result, and any refusal, are exactly OmegaConf.merge's, and the schema stays as built."""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from decent.core.registry import merged_over, structured
from decent.engine.config import RunConfig
from decent.strategies.dsgd import DSGDConfig

GIVEN = {"rounds": 7, "topology": {"name": "ring", "n": 5},
         "faults": {"drop": 0.1, "partition": {"start": 1, "rounds": 2, "parts": 2}},
         "ray": {"clients_per_actor": 3}}


def both(cls, *layers):
    """``merged_over``'s result and OmegaConf.merge's, as plain containers."""
    ours = merged_over(cls, *(OmegaConf.create(layer) for layer in layers))
    theirs = OmegaConf.merge(structured(cls), *(OmegaConf.create(layer) for layer in layers))
    return ours, theirs


@pytest.mark.parametrize(("cls", "layers"), [
    (RunConfig, [GIVEN]), (RunConfig, [GIVEN, {"rounds": 9, "seed": 3}]), (RunConfig, [{}]),
    (DSGDConfig, [{"name": "dsgd", "lr": 0.3, "local_steps": 2}])])
def test_the_merge_is_omegaconfs_and_leaves_the_schema_as_built(cls, layers):
    before = OmegaConf.to_container(structured(cls))
    ours, theirs = both(cls, *layers)
    assert OmegaConf.to_container(ours) == OmegaConf.to_container(theirs)
    assert OmegaConf.to_object(ours) == OmegaConf.to_object(theirs)
    assert OmegaConf.get_type(ours) is cls
    assert OmegaConf.to_container(structured(cls)) == before
    # the next merge starts from the defaults, not from what the last one merged
    assert OmegaConf.to_container(merged_over(cls)) == before


@pytest.mark.parametrize("bad", [{"round": 3}, {"rounds": "many"},
                                 {"faults": {"drop": "x"}}, {"topology": {"n": [1]}}])
def test_a_refusal_is_omegaconfs_own(bad):
    with pytest.raises(OmegaConfBaseException) as ours:
        merged_over(RunConfig, OmegaConf.create(bad))
    with pytest.raises(OmegaConfBaseException) as theirs:
        OmegaConf.merge(structured(RunConfig), OmegaConf.create(bad))
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)
    assert ours.value.full_key == theirs.value.full_key


def test_a_schema_that_cannot_be_pickled_or_was_imported_again_is_still_its_own():
    @dataclasses.dataclass
    class Local:  # defined in a function: pickle cannot find it by name
        lr: float = 0.1
        steps: int = 1

    merged = merged_over(Local, OmegaConf.create({"lr": 0.5}))
    assert OmegaConf.get_type(merged) is Local and OmegaConf.to_object(merged) == Local(0.5)

    module = types.ModuleType("decent_test_reimported")
    sys.modules[module.__name__] = module
    try:
        def define() -> type:
            @dataclasses.dataclass
            class Section:
                lr: float = 0.1
            Section.__module__, Section.__qualname__ = module.__name__, "Section"
            module.Section = Section
            return Section

        old = define()
        assert OmegaConf.get_type(merged_over(old)) is old  # pickled by name, cached
        new = define()  # the module imported again: a new class of the same name
        assert new is not old
        assert OmegaConf.get_type(merged_over(old, OmegaConf.create({"lr": 2.0}))) is old
        assert OmegaConf.get_type(merged_over(new)) is new
    finally:
        del sys.modules[module.__name__]
