"""The fine-tune settings: defaults that pass, an explanation each, and clear refusals."""

from __future__ import annotations

import pytest

from core.tune.settings import SettingsError, TuneSettings


def test_the_defaults_pass_on_one_two_and_four_macs() -> None:
    for ranks in (1, 2, 4):
        TuneSettings().check(ranks)


def test_every_setting_is_explained() -> None:
    explained = TuneSettings.explanations()
    assert set(explained) == set(TuneSettings().to_dict())
    assert all(len(text) > 10 for text in explained.values())


def test_round_trip_and_unknown_names() -> None:
    settings = TuneSettings(iters=30, learning_rate=2e-4)
    assert TuneSettings.from_dict(settings.to_dict()) == settings
    with pytest.raises(SettingsError, match=r"unknown fine-tune setting.*bogus"):
        TuneSettings.from_dict({"bogus": 1})


@pytest.mark.parametrize(
    ("changes", "ranks", "words"),
    [
        ({"iters": 0}, 1, "iterations must be a whole number"),
        ({"batch_size": 3}, 2, "multiple of the 2 Macs training together, e.g. 2"),
        ({"learning_rate": 0}, 1, "learning rate must be above 0"),
        ({"learning_rate": True}, 1, "learning rate"),
        ({"lora_rank": -2}, 1, "the LoRA rank must be"),
        ({"val_batches": 0}, 1, "validation batches"),
    ],
)
def test_bad_values_are_refused_by_name(changes: dict, ranks: int, words: str) -> None:
    with pytest.raises(SettingsError, match=words):
        TuneSettings(**changes).check(ranks)
