dash
/dev/zero
