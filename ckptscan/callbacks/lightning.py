"""``LightningCallback``: the in-loop monitor as a ``lightning.pytorch.Callback``.

    trainer = L.Trainer(..., callbacks=[LightningCallback("ckptscan-live", every=100)])

Every ``every`` optimizer steps (``trainer.global_step``; batches of a gradient-accumulation cycle
share a step and count once) the monitor computes a point of the LightningModule's parameters; the
loss ``training_step`` returns goes to the store's log.  On an alarm: ``stop_on_alarm`` sets
``trainer.should_stop``, ``save_on_alarm`` writes ``trainer.save_checkpoint`` into
``<default_root_dir>/ckptscan-alarm-step<N>.ckpt``, and ``on_alarm(alarm)`` is called with
``alarm.control`` the Trainer and ``alarm.context["module"]``.  Imports ``lightning.pytorch`` (or the
older ``pytorch_lightning``) only here.
"""

from __future__ import annotations

from pathlib import Path

try:
    from lightning.pytorch import Callback
except ImportError:  # pragma: no cover - the older package name
    from pytorch_lightning import Callback  # type: ignore[assignment]  # the same class, its older package

from .monitor import DEFAULT_EVERY, Alarm, Monitor, open_for_callback


def _loss(outputs):
    if isinstance(outputs, dict):
        outputs = outputs.get("loss")
    return outputs if outputs is not None and hasattr(outputs, "item") or isinstance(outputs, float) else None


class LightningCallback(Callback):
    def __init__(
        self,
        out_dir: str | Path,
        every: int = DEFAULT_EVERY,
        *,
        on_alarm=None,
        stop_on_alarm: bool = False,
        save_on_alarm: bool = False,
        strict: bool = False,
        **monitor_kwargs,
    ):
        self.out_dir, self.every, self.strict = Path(out_dir), every, strict
        self.user_on_alarm, self.stop_on_alarm, self.save_on_alarm = on_alarm, stop_on_alarm, save_on_alarm
        self.monitor_kwargs = monitor_kwargs
        self.monitor: Monitor | None = None
        self._trainer = self._module = None
        self._recorded: int | None = None

    def on_fit_start(self, trainer, pl_module):
        if self.monitor is None:
            self.monitor = open_for_callback(
                self.strict,
                pl_module,
                self.out_dir,
                self.every,
                on_alarm=self._on_alarm,
                **self.monitor_kwargs,
            )

    def on_train_start(self, trainer, pl_module):
        if self.monitor is not None and trainer.global_step > 0:  # resumed: weights and loops restored
            self.monitor.start(trainer.global_step)
            # the first batches of an accumulation cycle still read this step: already taken
            self._recorded = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step == self._recorded or self.monitor is None:
            return
        self._recorded, self._trainer, self._module = step, trainer, pl_module
        self.monitor.step(step, loss=_loss(outputs))

    def on_fit_end(self, trainer, pl_module):
        if self.monitor is not None:
            self.monitor.close()

    def _on_alarm(self, alarm: Alarm) -> None:
        trainer = self._trainer
        alarm.control, alarm.context = trainer, {"module": self._module}
        if trainer is not None:
            if self.stop_on_alarm:
                trainer.should_stop = True
                alarm.actions.append("stop")
            if self.save_on_alarm:
                trainer.save_checkpoint(
                    str(Path(trainer.default_root_dir) / f"ckptscan-alarm-step{alarm.step}.ckpt")
                )
                alarm.actions.append("save")
        if self.user_on_alarm is not None:
            self.user_on_alarm(alarm)
