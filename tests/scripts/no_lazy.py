"""Never touches a lazy tensor."""
print("hello from a plain script")
