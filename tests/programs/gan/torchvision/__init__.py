"""torchvision, as much of it as the GAN test uses (utils.save_image): see utils.py."""
