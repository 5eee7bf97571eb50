"""TrainStep: one optimizer update with loss scale, clipping, accumulation, EMA, all-reduce.

Order of operations per micro-step (the semantics issue #4 fixes; mindcv's cell differs):
  1. grads of the loss, scaled by `loss_scale`, are unscaled first and divided by k
     (accumulating k micro-batches equals one step on the k-times larger batch);
  2. with k > 1 they are summed into an accumulator; steps 3-6 run only every k-th micro-step;
  3. data parallel: gradients are all-reduced (DistributedGradReducer) - once per update;
  4. clipped by the global norm of all gradients - once per update, after the all-reduce;
  5. the optimizer applies them (LR schedules advance per update: the optimizer's global_step);
  6. EMA shadow weights follow: ema = d * ema + (1 - d) * w, d = decay * (1 - exp(-n / warmup))
     when warmup > 0, n = number of updates so far.
The cell returns the (unscaled) loss of the micro-batch.
"""

from __future__ import annotations

from contextlib import contextmanager

from mindspore import Parameter, Tensor, nn, ops
from mindspore import amp as ms_amp
from mindspore import dtype as mstype
from mindspore.context import ParallelMode
from mindspore.parallel._utils import _get_device_num, _get_gradients_mean, _get_parallel_mode

from sporeflow.storage.checkpoints import overwrite

_scale = ops.MultitypeFuncGraph("scale")
_unscale = ops.MultitypeFuncGraph("unscale")
_accumulate = ops.MultitypeFuncGraph("accumulate")
_zero = ops.MultitypeFuncGraph("zero")
_ema = ops.MultitypeFuncGraph("ema")


@_scale.register("Tensor", "Tensor")
def _scale_grad(factor, grad):
    return grad * ops.cast(factor, grad.dtype)


@_unscale.register("Tensor", "Tensor")
def _unscale_grad(scale, grad):
    return grad / ops.cast(scale, grad.dtype)


@_accumulate.register("Tensor", "Tensor")
def _accumulate_grad(accum, grad):
    return ops.assign_add(accum, grad)


@_zero.register("Tensor")
def _zero_accum(accum):
    return ops.assign(accum, ops.zeros_like(accum))


@_ema.register("Tensor", "Tensor", "Tensor")
def _ema_update(decay, shadow, weight):
    return ops.assign(shadow, decay * shadow + (1.0 - decay) * weight)


def _setting(name: str, value: float) -> Parameter:
    return Parameter(Tensor(float(value), mstype.float32), name=name, requires_grad=False)


def data_parallel_reducer(weights) -> nn.Cell | None:
    """A DistributedGradReducer when MindSpore's parallel context is data/hybrid parallel."""
    if _get_parallel_mode() not in (ParallelMode.DATA_PARALLEL, ParallelMode.HYBRID_PARALLEL):
        return None
    return nn.DistributedGradReducer(weights, _get_gradients_mean(), _get_device_num())


class TrainStep(nn.Cell):
    def __init__(
        self,
        network_with_loss: nn.Cell,
        optimizer: nn.Optimizer,
        loss_scale: float = 1.0,
        clip_grad_norm: float = 0.0,
        accumulation_steps: int = 1,
        ema_decay: float = 0.0,
        ema_warmup: float = 0.0,
        grad_reducer: nn.Cell | None = None,
        dynamic_scale: bool = False,
        scale_factor: float = 2.0,
        scale_window: int = 1000,
    ):
        super().__init__(auto_prefix=False)
        self.network = network_with_loss
        self.network.set_grad()
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.hyper_map = ops.HyperMap()
        # graph inputs, not folded constants: stages with other values run one compiled graph
        self.loss_scale = _setting("train_step.loss_scale", loss_scale)
        self.grad_factor = _setting(
            "train_step.grad_factor", 1.0 / (loss_scale * accumulation_steps)
        )
        self.clip = clip_grad_norm > 0
        self.clip_norm = float(clip_grad_norm)
        self.k = int(accumulation_steps)
        self.reducer = grad_reducer
        self.dynamic = dynamic_scale
        if dynamic_scale:
            if accumulation_steps > 1:
                raise ValueError(
                    "a dynamic loss scale with accumulation_steps > 1 is not supported"
                )
            self.scale = Parameter(
                Tensor(float(loss_scale), mstype.float32), name="loss_scale", requires_grad=False
            )
            self.good_steps = Parameter(
                Tensor(0, mstype.int32), name="loss_scale_good_steps", requires_grad=False
            )
            self.scale_factor = float(scale_factor)
            self.scale_window = int(scale_window)
        if self.k > 1:
            self.accum = self.weights.clone(prefix="accum_grad", init="zeros")
            self.micro_step = Parameter(
                Tensor(0, mstype.int32), name="micro_step", requires_grad=False
            )
        self.use_ema = ema_decay > 0
        if self.use_ema:
            self.ema_weights = self.weights.clone(prefix="ema", init="same")
            self.ema_decay = float(ema_decay)
            self.ema_warmup = float(ema_warmup)
            self.ema_updates = Parameter(
                Tensor(0.0, mstype.float32), name="ema_updates", requires_grad=False
            )

    def _update(self, grads):
        """All-reduce -> clip -> optimizer -> EMA: everything that happens once per update."""
        if self.reducer is not None:
            grads = self.reducer(grads)
        if self.clip:
            grads = ops.clip_by_global_norm(grads, self.clip_norm)
        done = self.optimizer(grads)
        if self.use_ema:
            updates = ops.depend(self.ema_updates + 1.0, done)
            ops.assign(self.ema_updates, updates)
            decay = Tensor(self.ema_decay, mstype.float32)
            if self.ema_warmup > 0:
                decay = decay * (1.0 - ops.exp(-updates / self.ema_warmup))
            done = ops.depend(
                done, self.hyper_map(ops.partial(_ema, decay), self.ema_weights, self.weights)
            )
        return done

    def _dynamic_step(self, loss, *inputs):
        """Dynamic loss scale: skip the update and shrink the scale when a gradient overflows;
        grow it after `scale_window` finite steps in a row."""
        scale = self.scale * 1.0
        sens = ops.fill(loss.dtype, loss.shape, 1.0) * scale
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        grads = self.hyper_map(
            ops.partial(_unscale, scale), grads
        )  # divide: 1/scale may be denormal
        if ms_amp.all_finite(grads):
            loss = ops.depend(loss, self._update(grads))
            good = self.good_steps + 1
            if good >= self.scale_window:
                loss = ops.depend(loss, ops.assign(self.scale, scale * self.scale_factor))
                good = good * 0
            loss = ops.depend(loss, ops.assign(self.good_steps, good))
        else:
            loss = ops.depend(
                loss, ops.assign(self.scale, ops.maximum(scale / self.scale_factor, 1.0))
            )
            loss = ops.depend(loss, ops.assign(self.good_steps, self.good_steps * 0))
        return loss

    def construct(self, *inputs):
        loss = self.network(*inputs)
        if self.dynamic:
            return self._dynamic_step(loss, *inputs)
        sens = ops.ones_like(loss) * ops.cast(self.loss_scale, loss.dtype)
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        grads = self.hyper_map(ops.partial(_scale, self.grad_factor), grads)
        if self.k == 1:
            return ops.depend(loss, self._update(grads))
        loss = ops.depend(loss, self.hyper_map(_accumulate, self.accum, grads))
        step = self.micro_step + 1
        loss = ops.depend(loss, ops.assign(self.micro_step, step))
        if step % self.k == 0:
            loss = ops.depend(loss, self._update(self.accum))
            loss = ops.depend(loss, self.hyper_map(_zero, self.accum))
        return loss


@contextmanager
def ema_weights_in(train_step: TrainStep):
    """Temporarily put the EMA shadow weights into the network (for eval and export)."""
    raw = [Tensor(p.asnumpy()) for p in train_step.weights]
    for param, shadow in zip(train_step.weights, train_step.ema_weights, strict=False):
        overwrite(param, Tensor(shadow.asnumpy()))
    try:
        yield
    finally:
        for param, value in zip(train_step.weights, raw, strict=False):
            overwrite(param, value)
