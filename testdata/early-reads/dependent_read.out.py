first = lookup(key='book')
second = lookup(key='pen' if first > 10 else 'book')
result = first + second
