"""The demo's per-rung digit classifiers, trained at start on scikit-learn's bundled digits."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ray_ladder.core.context import RungContext

#: Pixels per digit image (8 x 8, values 0..16).
N_PIXELS = 64


@dataclass(frozen=True)
class DigitsSplit:
    """scikit-learn's digits, split once into training data and held-out data.

    Attributes:
        x_train: Training images, shape ``(n, 64)``.
        y_train: Training labels.
        x_test: Held-out images: the demo's traffic and the accuracy yardstick.
        y_test: Held-out labels.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    def samples(self) -> list[tuple[list[float], int]]:
        """Held-out ``(pixels, label)`` pairs, ready to send as JSON."""
        pairs = zip(self.x_test, self.y_test, strict=True)
        return [([float(v) for v in x], int(y)) for x, y in pairs]


def load_split(test_size: float = 0.3, seed: int = 0) -> DigitsSplit:
    """Load the digits bundled with scikit-learn and split them, stratified and seeded.

    Example:
        >>> split = load_split()
        >>> split.x_test.shape[1]
        64
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=test_size, random_state=seed, stratify=y)
    return DigitsSplit(x_train, y_train, x_test, y_test)


def _large(seed: int) -> Any:
    from sklearn.svm import SVC

    # An RBF kernel machine keeps most training images as support vectors: the "big" model.
    return SVC(kernel="rbf", C=10.0, gamma=0.001, random_state=seed)


def _mid(seed: int) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(),
                         LogisticRegression(solver="newton-cg", max_iter=1000,
                                            random_state=seed))


def _small(seed: int) -> Any:
    from sklearn.tree import DecisionTreeClassifier

    # A shallow tree is cheap anywhere and clearly worse: the price of running at all.
    return DecisionTreeClassifier(max_depth=6, random_state=seed)


@dataclass(frozen=True)
class ModelSpec:
    """Which model a rung serves.

    Attributes:
        rung: Rung name in the demo ladder.
        description: Human name of the model.
        build: ``seed -> unfitted scikit-learn estimator``.
    """

    rung: str
    description: str
    build: Callable[[int], Any]


#: The demo's models, best rung first: large on h100, mid on a100, small on cpu.
MODEL_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("h100", "SVC (RBF kernel, large)", _large),
    ModelSpec("a100", "logistic regression (mid)", _mid),
    ModelSpec("cpu", "decision tree, depth 6 (small)", _small),
)


@dataclass(frozen=True)
class TrainedModel:
    """A fitted model and how well it does on the held-out digits.

    Attributes:
        rung: The rung that serves it.
        description: Human name of the model.
        estimator: The fitted scikit-learn estimator.
        accuracy: Accuracy on the held-out split (0..1).
        train_s: Seconds the fit took.
    """

    rung: str
    description: str
    estimator: Any
    accuracy: float
    train_s: float


def train_models(split: DigitsSplit, specs: Sequence[ModelSpec] = MODEL_SPECS,
                 seed: int = 0) -> dict[str, TrainedModel]:
    """Fit one model per rung (deterministic for a given ``seed``) and score it held-out.

    Example:
        >>> models = train_models(load_split())
        >>> models["h100"].accuracy > models["cpu"].accuracy
        True
    """
    out: dict[str, TrainedModel] = {}
    for spec in specs:
        estimator = spec.build(seed)
        start = time.perf_counter()
        estimator.fit(split.x_train, split.y_train)
        took = time.perf_counter() - start
        accuracy = float(estimator.score(split.x_test, split.y_test))
        out[spec.rung] = TrainedModel(spec.rung, spec.description, estimator, accuracy, took)
    return out


class DigitClassifier:
    """Rung class: answers ``{"pixels": [64 numbers]}`` with ``{"digit": d, "model": ...}``.

    One class serves every compute rung; the rung's fitted model comes in through the
    Serve app's ``init_kwargs`` (pickled once to each replica).

    Args:
        rung: The rung this replica serves.
        model: A fitted scikit-learn classifier.
        description: Human name of the model (echoed in answers).

    Example:
        >>> clf = DigitClassifier(RungContext("cpu", 2, "demo"), model=fitted)  # doctest: +SKIP
        >>> clf({"pixels": [0.0] * 64})  # doctest: +SKIP
        {'digit': 1, 'model': 'decision tree, depth 6 (small)', 'rung': 'cpu'}
    """

    def __init__(self, rung: RungContext, model: Any, description: str = "") -> None:
        self.rung = rung
        self.model = model
        self.description = description or type(model).__name__

    def __call__(self, payload: Any) -> dict[str, Any]:
        """Classify one image; ``ValueError`` names what is wrong with a bad payload."""
        pixels = payload.get("pixels") if isinstance(payload, Mapping) else None
        if not isinstance(pixels, list) or len(pixels) != N_PIXELS:
            raise ValueError(f'expected {{"pixels": [{N_PIXELS} numbers]}}, got '
                             f"{type(payload).__name__} {str(payload)[:80]}")
        try:
            row = np.asarray(pixels, dtype=float).reshape(1, N_PIXELS)
        except (TypeError, ValueError):
            raise ValueError("pixels must be numbers") from None
        digit = int(self.model.predict(row)[0])
        return {"digit": digit, "model": self.description, "rung": self.rung.name}


def rung_classes(models: Mapping[str, TrainedModel]) -> dict[str, type]:
    """``build_app``'s ``rungs`` argument: the same class for every trained rung."""
    return dict.fromkeys(models, DigitClassifier)


def rung_init_kwargs(models: Mapping[str, TrainedModel]) -> dict[str, dict[str, Any]]:
    """``build_app``'s ``init_kwargs`` argument: each rung's fitted model and its name."""
    return {name: {"model": m.estimator, "description": m.description}
            for name, m in models.items()}
