"""Validation scores, accumulated as counts so ranks add them with one allreduce.

Classification: top-1 and top-5 accuracy (%). Segmentation (DeepCAM): the mean over classes of
the intersection over union TP / (TP + FP + FN), from a pixel confusion matrix, as the MLPerf-HPC
reference scores it; classes absent from both prediction and truth are left out of the mean.
"""

from __future__ import annotations

import torch


class Scores:
    """Counts for one validation pass; `counts` is the tensor to allreduce."""

    def __init__(self, task: str, num_classes: int, device: torch.device) -> None:
        if task not in ("classify", "segment"):
            raise ValueError(f"task must be 'classify' or 'segment', got {task!r}")
        self.task, self.num_classes = task, num_classes
        # classify: [correct top-1, correct top-5, seen]; segment: confusion[truth, predicted]
        size = 3 if task == "classify" else num_classes * num_classes
        self.counts = torch.zeros(size, dtype=torch.float64, device=device)

    def add(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        """logits (B, C) with targets (B,), or (B, C, H, W) with targets (B, H, W)."""
        if self.task == "classify":
            top = logits.topk(min(5, logits.shape[1]), dim=1).indices
            hits = top == targets[:, None]
            self.counts += torch.stack([hits[:, 0].sum(), hits.any(dim=1).sum(), torch.tensor(len(targets), device=hits.device)])
            return
        predicted = logits.argmax(dim=1)
        pairs = targets.flatten() * self.num_classes + predicted.flatten()
        self.counts += torch.bincount(pairs, minlength=self.num_classes**2).to(self.counts.dtype)

    def summary(self) -> dict[str, float]:
        """classify: {"val_top1", "val_top5"} in %; segment: {"val_iou" (mean over the classes present),
        "val_pixel_accuracy" in %}."""
        counts = self.counts.cpu()
        if self.task == "classify":
            seen = max(counts[2].item(), 1.0)
            return {"val_top1": 100.0 * counts[0].item() / seen, "val_top5": 100.0 * counts[1].item() / seen}
        confusion = counts.reshape(self.num_classes, self.num_classes)
        true_positive = confusion.diag()
        union = confusion.sum(dim=0) + confusion.sum(dim=1) - true_positive
        present = union > 0
        iou = (true_positive[present] / union[present]).mean().item() if present.any() else 0.0
        accuracy = true_positive.sum().item() / max(confusion.sum().item(), 1.0)
        return {"val_iou": iou, "val_pixel_accuracy": 100.0 * accuracy}
