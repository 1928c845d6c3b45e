"""A small image-classification training script with the classic slow spots.

Run `torchlint check examples/` to see them, and `torchlint fix --diff examples/`
to preview the rewrites.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class SmallNet(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, kernel_size=3, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


def make_loader(n: int = 512) -> DataLoader:
    images = torch.randn(n, 3, 32, 32)
    labels = torch.randint(0, 10, (n,))
    return DataLoader(TensorDataset(images, labels), batch_size=64, shuffle=True)


def train(epochs: int = 2) -> float:
    model = SmallNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = make_loader()
    class_weights = torch.ones(10).to(device)
    for epoch in range(epochs):
        running_loss = 0.0
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad(set_to_none=False)
            loss = F.cross_entropy(model(images), labels, weight=class_weights)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
        print(f"epoch {epoch}: loss {running_loss / len(loader):.4f}")
    return running_loss


if __name__ == "__main__":
    train()
