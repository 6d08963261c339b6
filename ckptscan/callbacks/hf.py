"""``HFCallback``: the in-loop monitor as a Hugging Face ``transformers.TrainerCallback``.

    trainer = Trainer(model, args, ..., callbacks=[HFCallback("ckptscan-live", every=100)])

Every ``every`` optimizer steps (``state.global_step``) the monitor computes a point; the loss the
Trainer logs goes to the store's log.  On an alarm of the online detector: ``stop_on_alarm`` sets
``control.should_training_stop``, ``save_on_alarm`` sets ``control.should_save`` (the Trainer then
writes a checkpoint at this step), and ``on_alarm(alarm)`` is called with ``alarm.control`` and
``alarm.context`` (the callback's keyword arguments: ``model``, ``optimizer``, ``lr_scheduler``), e.g.
to lower the learning rate.  transformers is imported only here.
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback

from .monitor import DEFAULT_EVERY, Alarm, Monitor, open_for_callback


class HFCallback(TrainerCallback):
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
        self.off = False  # the monitor could not be opened: the training goes on unmonitored
        self.user_on_alarm, self.stop_on_alarm, self.save_on_alarm = on_alarm, stop_on_alarm, save_on_alarm
        self.monitor_kwargs = monitor_kwargs
        self.monitor: Monitor | None = None
        self._control = None
        self._context: dict = {}

    def _ensure(self, model) -> Monitor | None:
        if self.monitor is None and not self.off:
            self.monitor = open_for_callback(
                self.strict, model, self.out_dir, self.every, on_alarm=self._on_alarm, **self.monitor_kwargs
            )
            self.off = self.monitor is None
        return self.monitor

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        monitor = self._ensure(model)
        if monitor is not None and state.global_step > 0:  # resumed: the checkpoint's weights are loaded
            monitor.start(state.global_step)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self._control, self._context = control, {"model": model, **kwargs}
        monitor = self._ensure(model)
        if monitor is not None:
            monitor.step(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.monitor is not None and logs and "loss" in logs:
            self.monitor.record(
                state.global_step, logs["loss"], logs.get("grad_norm"), logs.get("learning_rate")
            )

    def on_train_end(self, args, state, control, **kwargs):
        if self.monitor is not None:
            self.monitor.close()

    def _on_alarm(self, alarm: Alarm) -> None:
        alarm.control, alarm.context = self._control, self._context
        if self._control is not None:
            if self.stop_on_alarm:
                self._control.should_training_stop = True
                alarm.actions.append("stop")
            if self.save_on_alarm:
                self._control.should_save = True
                alarm.actions.append("save")
        if self.user_on_alarm is not None:
            self.user_on_alarm(alarm)
