"""Where metrics go: ``metrics.jsonl`` (one JSON object per round) and Weights & Biases.

W&B runs offline unless ``tracking.wandb.mode=online``: nothing needs the network, and
``wandb sync <run_dir>/wandb/offline-run-*`` uploads an offline run later."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from decent.engine.config import RunConfig, to_dict


class Tracker:
    def __init__(self, cfg: RunConfig, run_dir: Path, run_id: str,
                 resume_id: str | None = None) -> None:
        self.metrics = open(run_dir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        self.wandb = None
        wb = cfg.tracking.wandb
        if wb.mode != "disabled":
            import wandb

            self.wandb = wandb.init(
                project=wb.project, entity=wb.entity, group=wb.group, name=run_id,
                config=to_dict(cfg), mode=wb.mode, dir=str(run_dir), reinit="finish_previous",
                # a resumed run continues the W&B run it checkpointed
                id=resume_id, resume="allow" if resume_id else None,
                # wandb's own closing lines would name the temporary run directory; the
                # CLI prints the final path instead
                settings=wandb.Settings(silent=True, console="off"),
            )

    def reopen(self) -> None:
        """Continue ``metrics.jsonl`` as it is now on disk (after a rewind rewrote it)."""
        path = Path(self.metrics.name)
        self.metrics.close()
        self.metrics = open(path, "a", encoding="utf-8")  # noqa: SIM115

    @property
    def wandb_id(self) -> str | None:
        return None if self.wandb is None else self.wandb.id

    def log(self, row: dict[str, Any]) -> None:
        try:
            self.metrics.write(json.dumps(row, sort_keys=True) + "\n")
            self.metrics.flush()
        except OSError as exc:  # a full disk: name the file (a write error does not)
            raise OSError(exc.errno, exc.strerror, self.metrics.name) from None
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in row.items() if k != "round"}, step=row["round"])

    def close(self, summary: dict[str, Any] | None = None) -> None:
        try:
            self.metrics.close()
        except OSError:
            if summary is not None:  # otherwise the run's own error is already on its way
                raise
        if self.wandb is not None:
            if summary:
                self.wandb.summary.update(summary)
            self.wandb.finish(exit_code=0 if summary is not None else 1)
            self.wandb = None
