help
rnu
