"""A small image-classification training script with the classic slow spots.

Run `torchlint check examples/` to see them, and `torchlint fix --diff examples/`
to preview the rewrites.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

# Left on from a debugging session.
torch.autograd.set_detect_anomaly(True)


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


class AugmentedImages(Dataset):
    """Random images, flipped at random on every access (stand-in for decoding JPEGs)."""

    def __init__(self, n: int = 512) -> None:
        self.images = torch.randn(n, 3, 32, 32)
        self.labels = torch.randint(0, 10, (n,))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        image = self.images[index]
        if torch.rand(()) < 0.5:
            image = torch.flip(image, dims=[2])
        return image, self.labels[index]


def make_dataset(n: int = 512) -> TensorDataset:
    images = torch.randn(n, 3, 32, 32)
    labels = torch.randint(0, 10, (n,))
    return TensorDataset(images, labels)


def evaluate(model: nn.Module, dataset: TensorDataset) -> float:
    loader = DataLoader(dataset, batch_size=256, num_workers=2)
    model.eval()
    correct = 0
    for images, labels in loader:
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        predictions = model(images).argmax(dim=1)
        correct += int((predictions.cpu().numpy() == labels.cpu().numpy()).sum())
    return correct / len(loader.dataset)


def train(epochs: int = 2) -> float:
    model = SmallNet().to(device)
    if torch.cuda.device_count() > 1:
        model = nn.DataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train_loader = DataLoader(AugmentedImages(), batch_size=64, shuffle=True)
    val_set = make_dataset(128)
    class_weights = torch.ones(10).to(device)
    for epoch in range(epochs):
        running_loss = 0.0
        step_losses = []
        for images, labels in train_loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad(set_to_none=False)
            sample_weights = torch.ones(images.shape[0]).to(device)
            per_sample = F.cross_entropy(model(images), labels, weight=class_weights, reduction="none")
            loss = (per_sample * sample_weights).mean()
            running_loss += loss.item()
            loss.backward()
            optimizer.step()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            step_losses.append(loss)
            torch.cuda.empty_cache()
        accuracy = evaluate(model, val_set)
        print(f"epoch {epoch}: loss {running_loss / len(train_loader):.4f}, accuracy {accuracy:.3f}")
    return running_loss


def predict(model: nn.Module, dataset: TensorDataset) -> torch.Tensor:
    loader = DataLoader(dataset, batch_size=256, num_workers=2, pin_memory=True)
    outputs = []
    with torch.no_grad():
        for images, _ in loader:
            outputs.append(model(images.to(device)).argmax(dim=1))
    return torch.cat(outputs).cpu()


if __name__ == "__main__":
    train()
