! Solve A x = b for a dense n x n system with LAPACK's dgesv (A column-major).
subroutine flsolve_dgesv(n, a, b, info) bind(c, name="flsolve_dgesv")
    use iso_c_binding, only: c_int, c_double
    implicit none
    integer(c_int), value, intent(in) :: n
    real(c_double), intent(inout) :: a(n, n), b(n)
    integer(c_int), intent(out) :: info
    integer :: ipiv(n)
    external :: dgesv
    call dgesv(n, 1, a, n, ipiv, b, n, info)
end subroutine flsolve_dgesv
