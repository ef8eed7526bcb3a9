"""The `elmo` pipeline component: runs the biLM over docs, stores its layers, feeds its listeners.

The pipe owns what is stored on the docs, its listeners (spaCy's ListenedToComponent protocol, as on
`Tok2Vec`), each learning its own mix, and the bounded cache that gives a frozen biLM's layers in training;
its model, a `spacy-elmo.BiLM.v1` layer, owns the weights and how they run.

The cache is filled in a training session only (from a frozen `update` until `nlp.evaluate` has scored or the
pipe is saved): the training docs and the dev docs come back every epoch. Plain prediction neither reads nor
fills it unless `cache_predictions` asks, so a service's memory and speed do not depend on what it has seen.
"""

import itertools
import multiprocessing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable, Optional, Union

from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example, validate_examples, validate_get_examples
from thinc.api import Model, Optimizer, get_array_module
from thinc.types import Floats3d

from . import extensions
from .errors import add_requirement
from .layers import bilm_model
from .layers.cache import LayerCache, doc_key
from .layers.listener import ElmoListener
from .mix import MIX_NAMES, mix_layers, named_mix_weights

STORE_OPTIONS = ("layers", "vectors", "both", "none")
STORE_DTYPES = ("float32", "float16")


def _in_spacy_worker() -> bool:
    """Whether this process is a worker of spaCy's `nlp.pipe(n_process=N)`. Its docs reach the parent through
    `Doc.to_bytes`, which drops per-doc hooks and warns (W109) for each worker; the parent re-adds them."""
    target = getattr(multiprocessing.current_process(), "_target", None)
    where = (getattr(target, "__module__", None), getattr(target, "__name__", None))
    return where == ("spacy.language", "_apply_pipes")


@Language.factory(
    "elmo",
    assigns=["doc._.elmo_layers", "doc._.elmo_mix", "doc._.elmo"],
    default_config={
        "model": {"@architectures": bilm_model.ARCHITECTURE},  # its settings filled from BiLM.v1's defaults
        "default_mix": "average",
        "store": "layers",
        "store_dtype": "float32",
        "set_vector_hooks": "auto",
        "to_cpu": True,
        "cache_size_mb": 1024,
        "cache_predictions": False,
    },
)
class Elmo(TrainablePipe):
    """The `elmo` component, built by `nlp.add_pipe("elmo", config=...)`; its settings:

    model: the biLM layer, spacy-elmo.BiLM.v1: the weights and how they run (its docstring lists them).
    default_mix: the mix behind doc._.elmo / span._.elmo / token._.elmo: "average", "top", or a
        list of n_layers weights used as given.
    store: what is kept on each doc: "layers" (doc._.elmo_layers; vectors mixed on access), "vectors"
        (only the mixed vectors: 1/(L+1) of the memory), "both", or "none". Listening components read
        the layers at prediction time, so with listeners the layers are kept whatever this says.
    store_dtype: "float32" or "float16" (half the memory) for what is kept.
    set_vector_hooks: make doc/span/token .vector (mean of token vectors) and .similarity (cosine) use ELMo:
        true, false, or "auto" (on when the vocab has no static vectors and the pipe keeps vectors or layers;
        off in `nlp.pipe(n_process=N)` workers, which cannot send hooks back: re-add them there with
        `spacy_elmo.set_vector_hooks(doc)`).
    to_cpu: store numpy arrays on the CPU; false keeps cupy arrays on the GPU when running there.
    cache_size_mb: bound of the layer cache of a frozen biLM in training (0 = no cache): the training and dev
        docs' layers, not recomputed every epoch; `pipe.cache.clear()` gives the memory back after training.
    cache_predictions: also read and fill the cache at prediction (a stream that repeats texts runs faster;
        what caches the training docs of a frozen pipe in [training] annotating_components). Off by default
        (and for pipelines saved before it), so that prediction's memory and speed never depend on the past.
    """

    def __init__(
        self,
        nlp: Language,
        name: str,
        model: Model[list[Doc], list[Floats3d]],
        default_mix: Union[str, list[float]],
        store: str,
        store_dtype: str,
        set_vector_hooks: Union[bool, str],
        to_cpu: bool,
        cache_size_mb: int,
        cache_predictions: bool = False,
    ) -> None:
        for setting, value, allowed in (("store", store, STORE_OPTIONS), ("store_dtype", store_dtype, STORE_DTYPES)):
            if value not in allowed:
                raise ValueError(f"elmo: {setting}={value!r}; expected one of {allowed}")
        if isinstance(default_mix, str) and default_mix not in MIX_NAMES:
            raise ValueError(f"elmo: default_mix={default_mix!r}; expected 'average', 'top' or a list of weights")
        if cache_size_mb < 0:
            raise ValueError(f"elmo: cache_size_mb must be >= 0, got {cache_size_mb}")
        if not isinstance(cache_predictions, bool):
            raise ValueError(f"elmo: cache_predictions={cache_predictions!r}; expected true or false")
        if set_vector_hooks not in (True, False, "auto"):
            raise ValueError(f'elmo: set_vector_hooks={set_vector_hooks!r}; expected true, false or "auto"')
        if set_vector_hooks is True and store == "none":
            raise ValueError("elmo: set_vector_hooks needs vectors on the doc; use store='layers', 'vectors' or 'both'")
        if model.name != bilm_model.BILM_LAYER_NAME:
            raise ValueError(f"elmo: model must be a spacy-elmo.BiLM.v1 layer, got {model.name!r}")
        # `spacy package` makes meta["requirements"] its package's: an onnxruntime pipeline's installs ONNX Runtime
        self._meta = nlp.meta if model.attrs["settings"].runtime == "onnxruntime" else None
        self._list_requirements()
        self.vocab = nlp.vocab
        self.model = model
        self.name = name
        self.default_mix = default_mix if isinstance(default_mix, str) else [float(w) for w in default_mix]
        self.store = store
        self.store_dtype = store_dtype
        self.set_vector_hooks = set_vector_hooks
        self.to_cpu = to_cpu
        self.cfg: dict[str, Any] = {}
        self.cache = LayerCache(cache_size_mb * 2**20)
        self.cache_predictions = cache_predictions
        # in a training session: from a frozen `update` until `score` (the end of nlp.evaluate) or a save
        self._in_training = False
        self.listener_map: dict[str, list[ElmoListener]] = {}
        extensions.install_extensions()

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "Elmo":
        super().from_bytes(bytes_data, exclude=exclude)
        self._reset_cache()  # new weights: cached layers are stale
        self._list_requirements()
        return self

    def from_disk(self, path: Any, *, exclude: Iterable[str] = tuple()) -> "Elmo":
        """As spaCy's, with errors about the saved weights naming their file (`PATH/model`)."""
        with bilm_model.saved_weights_at(str(Path(path) / "model")):
            super().from_disk(path, exclude=exclude)
        self._reset_cache()
        self._list_requirements()
        return self

    def _list_requirements(self) -> None:
        """List onnxruntime in the pipeline's meta (again after loading: a saved meta.json replaces the list,
        and spaCy reads it before the pipes)."""
        if self._meta is not None:
            add_requirement(self._meta.setdefault("requirements", []), "onnxruntime", extra="onnx")

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        """As spaCy's; a save ends the training session, so later predictions leave the cache alone."""
        self._in_training = False
        return super().to_bytes(exclude=exclude)

    def to_disk(self, path: Any, *, exclude: Iterable[str] = tuple()) -> None:
        """As spaCy's; a save (`spacy train` saves when it ends) ends the training session, so predictions
        after it leave the cache alone. Saving changes no weight: the cached layers stay valid."""
        self._in_training = False
        super().to_disk(path, exclude=exclude)

    def _reset_cache(self) -> None:
        """Forget every cached layer and end the training session: the weights are new or reloaded."""
        self.cache.clear()
        self._in_training = False

    # --- the biLM -----------------------------------------------------------------------------

    @property
    def bilm(self):
        """The PyTorch biLM (loaded on first access); runtime "torch" only."""
        return bilm_model.ensure_bilm(self.model)

    @property
    def runtime(self) -> str:
        """ "torch" or "onnxruntime" (the model's setting)."""
        return self.model.attrs["settings"].runtime

    @property
    def fine_tune(self) -> bool:
        """Whether the biLM trains with the listeners (the model's setting)."""
        return self.model.attrs["settings"].fine_tune

    @property
    def stateful(self) -> bool:
        """Whether LSTM state is carried from batch to batch (the model's setting)."""
        return bool(bilm_model.runner_of(self.model).stateful)

    def listener_dims(self) -> tuple[int, int]:
        """(width, n_layers) of the biLM's outputs, loading it if need be: what a listener is built for."""
        options = bilm_model.ensure_loaded(self.model).options
        return options.output_dim, options.n_output_layers

    # --- listeners (spaCy's ListenedToComponent protocol, as on spaCy's Tok2Vec) ------------------

    @property
    def listeners(self) -> list[ElmoListener]:
        """Every listener, in the order of the components they belong to."""
        return [m for c in self.listening_components for m in self.listener_map[c]]

    @property
    def listening_components(self) -> list[str]:
        return list(self.listener_map.keys())

    def add_listener(self, listener: ElmoListener, component_name: str) -> None:
        """Called by `Language` (add_pipe, initialize, loading) through `find_listeners`. The listener
        learns its dims now if the biLM is loaded, else when the pipe or the listener is initialized."""
        self.listener_map.setdefault(component_name, [])
        if listener not in self.listener_map[component_name]:
            self.listener_map[component_name].append(listener)
        listener.upstream_dims = self.listener_dims
        if bilm_model.runner_of(self.model).loaded:
            listener.set_upstream_dims(*self.listener_dims())

    def remove_listener(self, listener: ElmoListener, component_name: str) -> bool:
        if listener in self.listener_map.get(component_name, []):
            self.listener_map[component_name].remove(listener)
            if not self.listener_map[component_name]:
                del self.listener_map[component_name]
            return True
        return False

    def find_listeners(self, component: Any) -> None:
        """Register every ElmoListener in `component`'s model whose upstream is this pipe (or "*")."""
        model = getattr(component, "model", None)
        if isinstance(model, Model):
            for node in model.walk():
                if isinstance(node, ElmoListener) and node.upstream_name in ("*", self.name):
                    self.add_listener(node, component.name)

    def reset_state(self) -> None:
        """Stateful mode: forget the carried LSTM state."""
        bilm_model.runner_of(self.model).reset_state()

    # --- prediction ---------------------------------------------------------------------------

    def predict(self, docs: Iterable[Doc]) -> list[Floats3d]:
        """The biLM's layers for `docs`: from the cache only in a training session (the dev docs, the same
        at every evaluation) or when `cache_predictions` asks; otherwise computed, and nothing is kept."""
        return self._embed(list(docs), cached=self._in_training or self.cache_predictions)

    @property
    def _can_cache(self) -> bool:
        """Whether layers can be cached at all: a frozen, stateless biLM (fine-tuning changes the weights every
        step; carried LSTM state makes a doc's layers depend on the docs before it) and a cache of some size."""
        return not self.fine_tune and not self.stateful and self.cache.max_bytes > 0

    def _embed(self, docs: list[Doc], cached: bool) -> list[Floats3d]:
        """Run the biLM over `docs`; with `cached`, over only those not in the cache, and keep their layers."""
        if not docs:
            return []
        if not cached or not self._can_cache:
            return self.model.predict(docs)
        keys = [doc_key(doc) for doc in docs]
        found: list[Optional[Floats3d]] = [self.cache.get(key) for key in keys]
        missing = [i for i, value in enumerate(found) if value is None]
        if missing:
            computed = self.model.predict([docs[i] for i in missing])
            for i, layers in zip(missing, computed):
                found[i] = layers
                self.cache.put(keys[i], layers)
        return found  # type: ignore[return-value]

    def score(self, examples: Iterable[Example], **kwargs: Any) -> dict[str, Any]:
        """As spaCy's (no scores of its own). `nlp.evaluate` calls it last, after its predictions: it ends the
        training session, so predictions after an evaluation leave the cache alone until the next update."""
        self._in_training = False
        return super().score(examples, **kwargs)

    def set_annotations(self, docs: Iterable[Doc], layers: list[Floats3d]) -> None:
        keep_layers = self.store in ("layers", "both") or bool(self.listener_map)
        keep_vectors = self.store in ("vectors", "both")
        # "auto" is decided per batch: static vectors may be added after the pipe (`[initialize] vectors`)
        auto = self.store != "none" and self.vocab.vectors.size == 0 and not _in_spacy_worker()
        hooks = auto if self.set_vector_hooks == "auto" else bool(self.set_vector_hooks)
        weights = named_mix_weights(self.default_mix, int(layers[0].shape[0])) if len(layers) else None
        for doc, doc_layers in zip(docs, layers):
            if self.to_cpu:
                doc_layers = self.model.ops.to_numpy(doc_layers)
            stored = get_array_module(doc_layers).array(doc_layers, dtype=self.store_dtype, copy=True)
            doc._.set(extensions.MIX, weights)
            doc._.set(extensions.LAYERS, stored if keep_layers else None)
            # mixed in float32, kept in the stored layers' dtype
            doc._.set(extensions.STORED_VECTORS, mix_layers(stored, weights) if keep_vectors else None)
            if hooks:
                extensions.set_vector_hooks(doc)

    # --- training -----------------------------------------------------------------------------

    def initialize(self, get_examples: Callable[[], Iterable[Example]], *, nlp: Optional[Language] = None) -> None:
        """Load the biLM (a bad path or a mismatched weight file fails here), check it on a few docs and tell
        the listeners its size. The cache starts empty and stays off until a training `update`: a pipeline
        initialized to fail early, then used to predict, keeps no layers."""
        validate_get_examples(get_examples, "Elmo.initialize")
        self.model.initialize()
        sample = [eg.predicted for eg in itertools.islice(get_examples(), 5)]
        if sample:
            self.model.predict(sample)
        dims = self.listener_dims()
        for listener in self.listeners:
            listener.set_upstream_dims(*dims)
        self._reset_cache()

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[dict[str, float]] = None,
    ) -> dict[str, float]:
        """Embed the batch and hand the layers to the listeners (which do the learning). A frozen biLM's
        layers are cached (a training doc comes back every epoch) and the training session starts, so
        that the evaluation that follows reads and fills the cache too."""
        if losses is None:
            losses = {}
        examples = list(examples)
        validate_examples(examples, "Elmo.update")
        losses.setdefault(self.name, 0.0)
        if not self.listeners:
            return losses
        docs = [eg.predicted for eg in examples]
        batch_id = ElmoListener.get_batch_id(docs)
        if not self.fine_tune:
            self._in_training = True
            layers = self._embed(docs, cached=True)
            for listener in self.listeners:  # the biLM is frozen: no gradient goes back to it
                listener.receive(batch_id, layers, lambda d_layers: [])
            return losses
        ops = self.model.ops
        layers, bp_layers = self.model.begin_update(docs)
        d_layers = [ops.alloc3f(*x.shape) for x in layers]

        def accumulate_gradient(one_d_layers: list[Floats3d]) -> list[Doc]:
            for i, d in enumerate(one_d_layers):
                d_layers[i] += d
                squares: Any = d**2
                losses[self.name] += float(squares.sum())
            return []

        def backprop(one_d_layers: list[Floats3d]) -> list[Doc]:
            accumulate_gradient(one_d_layers)
            d_docs = bp_layers(d_layers)
            if sgd is not None:
                self.finish_update(sgd)
            return d_docs

        for listener in self.listeners[:-1]:
            listener.receive(batch_id, layers, accumulate_gradient)
        self.listeners[-1].receive(batch_id, layers, backprop)
        return losses

    def get_loss(self, examples: Iterable[Example], scores: Any) -> None:
        raise NotImplementedError("elmo: the listening components compute the losses")

    def add_label(self, label: str) -> int:
        raise NotImplementedError("elmo: this component has no labels")


make_elmo = Elmo  # the `elmo` factory is the class itself; the factory's public name stays
